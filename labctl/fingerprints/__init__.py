"""Source code fingerprints: normalised tokens (`tokens`), winnowing (`winnow`), a room's
units and names (`room`), and the base code they are measured against (`base`).

Shared by `labctl grade --similarity` (which rooms look alike) and the base-code rule
(a function that is labctl's own clean room or the course's starting code earns nothing,
in `grade` as in `evidence submit`). Nothing here runs a room's code.
"""

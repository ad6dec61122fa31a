"""`labctl verify clean-room`, `labctl clean-room init` and `labctl faults`.

- `fixtures`: seeded fixtures per contract function, from the contract alone.
- `observe`: run a clean room on them behind the sandbox and record what happened.
- `checks`: the checks, each a documented unit that reads that record.
- `diagnosis`: name a failure after the catalogued fault it behaves like.
- `verify`: the orchestration, the report and the evidence.
- `matrix`: every check against every fault (`labctl faults`).
- `stubs`: a fresh clean room of stubs from the contract (`labctl clean-room init`).
"""

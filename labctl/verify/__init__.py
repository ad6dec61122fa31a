"""`labctl verify clean-room`, `labctl clean-room init` and `labctl faults`.

- `functions`: what each contract function returns and is built from.
- `builders`: the seeded arrays the inputs are built from, and `Fixture`.
- `fixtures_primitives`, `fixtures_composed`: each contract function's fixtures.
- `fixtures`: serves them, with their float32 probes, causal variants and reference outputs.
- `bad_input`: the contract's Bad input cases.
- `observe`: run a clean room on them behind the sandbox and record what happened.
- `compare`: tolerance v1 and how a value is compared with the reference.
- `checks`: the checks, each a documented unit that reads that record.
- `diagnosis`: name a failure after the catalogued fault it behaves like.
- `verify`: the orchestration, the report and the evidence.
- `matrix`: every check against every fault (`labctl faults`).
- `stubs`: a fresh clean room of stubs from the contract (`labctl clean-room init`).
"""

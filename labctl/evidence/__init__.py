"""Evidence: the course's `learn-llm.evidence.v1` records, where they are kept, how they are checked."""

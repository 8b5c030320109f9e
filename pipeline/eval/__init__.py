"""Scoring reward models on a release (`prb eval`): adapters behind one interface and their
registry (`rewards`, `hf`, `models`), pairwise accuracy (`evaluate`), the Best-of-N downstream
check (`bon`) and what they write (`report`)."""

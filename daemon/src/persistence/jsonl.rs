//! JSONL backend (DESIGN §4.4, §4.5): one plain `.jsonl` file per session.

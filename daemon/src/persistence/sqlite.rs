//! SQLite backend (DESIGN §4.6): one database for every session; `locate` answers `None`.

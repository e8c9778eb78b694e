//! Support for end-to-end tests.

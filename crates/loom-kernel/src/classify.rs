//! K10-R6 data classification: paths whose values must not leave the system.

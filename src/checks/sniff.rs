//! S5: does the declared content type match the bytes.

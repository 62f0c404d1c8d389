//! The rubric file: typed, validated, content-addressed.

//! Check definitions from probes/, embedded in the binary.

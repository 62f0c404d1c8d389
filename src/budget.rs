//! What one response can cost: every bound on reading and evaluating one response, and on the
//! evidence kept from it, in one place.
//!
//! The prober's own caps come first (`probe::http::FetchConfig`: 64 KiB of response head, 1 MiB
//! of body, bounded decoding). These bounds apply where the bytes are parsed and where evidence is
//! written, so that any response within the read caps is evaluated in work linear in its size.
//! Reaching a bound is never a silent cut: it is a finding (a deviation code that fails a check)
//! or a visible note in the receipt or report, with a count of what was left out. The README
//! section "Bounds: what one response can cost" documents each bound and what happens at it.

// ---- Reading a PaymentRequired (`x402::parse`) ----

/// Largest decoded `PAYMENT-REQUIRED` (or settlement) header read. More is `header.too_large`,
/// refused unread. Bazaar schemas make these headers large, so this is above the ~8 KiB other
/// clients use; the prober's 64 KiB head cap bounds the encoded header first.
pub const MAX_HEADER_DECODED_BYTES: usize = 64 * 1024;
/// Largest body the parser reads (the prober stores at most 1 MiB anyway). More is
/// `body.too_large`, refused unread.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// `accepts` entries read into requirements. The entries past this are skipped without being
/// decoded and only counted; C1 and C2 fail with `accepts.too_many`, whose receipt says how many
/// were sent. Real endpoints offer a handful (one per network and asset).
pub const MAX_ACCEPTS_ENTRIES: usize = 64;
/// Nesting depth of a decoded PaymentRequired (the top-level object is depth 1). Deeper is
/// `header.too_deep` / `body.too_deep`, and nothing of that carrier is read. A real
/// PaymentRequired with a bazaar schema nests about 10 deep.
pub const MAX_JSON_DEPTH: usize = 64;
/// JSON values (objects, arrays, strings, numbers, booleans, nulls) in a decoded PaymentRequired,
/// not counting the skipped `accepts` entries. More is `header.too_complex` /
/// `body.too_complex`, and nothing of that carrier is read. A real one has a few hundred.
pub const MAX_JSON_VALUES: usize = 20_000;
/// Characters of endpoint-supplied text quoted in one deviation message (control characters
/// escaped); longer text is cut with `...`.
pub const MAX_MESSAGE_CHARS: usize = 300;
/// Characters of one endpoint-supplied value (an address, a network name) quoted inside a
/// deviation message, before the message itself is bounded.
pub const MAX_QUOTED_VALUE_CHARS: usize = 120;

// ---- The discovery schema (C5, `checks::conformance`) ----

/// JSON values in the bazaar `schema` that C5 compiles. More is
/// `extensions.bazaar.schema.too_complex`, and the schema is not compiled.
pub const MAX_SCHEMA_VALUES: usize = 2_000;
/// Worst-case work of validating the bazaar `info` against its `schema`, in applications of a
/// schema node to an instance node (strings weigh by their length, see `conformance`). JSON
/// Schema validation is exponential in the worst case (`anyOf` over a recursive `$ref`), so C5
/// first bounds the work from the two documents alone; more is
/// `extensions.bazaar.schema.too_complex` and nothing is validated.
pub const MAX_SCHEMA_WORK: u64 = 200_000;
/// Backtracking steps of one `pattern` with look-around or back-references (the others run on a
/// linear-time engine).
pub const MAX_REGEX_BACKTRACK: usize = 10_000;
/// Compiled size of one `pattern`, in bytes. Larger makes the schema invalid for C5.
pub const MAX_REGEX_BYTES: usize = 256 * 1024;

// ---- The Solana RPC (`probe::solana_rpc`) ----

/// Bytes of one account's data kept in an observation: a token account's base layout is 165
/// bytes and a mint's 82, and Token-2022's account type byte follows them; the rest (extensions)
/// is counted, not kept.
pub const MAX_SOLANA_ACCOUNT_BYTES: usize = 256;
/// Accounts one free run reads on the Solana RPC (a mint and a payout account per entry, the
/// same account read once): the entries past it are `unmeasured`.
pub const MAX_SOLANA_ACCOUNTS: usize = 16;

// ---- Receipts (`checks`) ----

/// Deviations kept in one receipt list (C1, C2, C5 `deviations` and `notes`); the receipt counts
/// the rest in `<list>_omitted`. The outcome is decided on every deviation, kept or not.
pub const MAX_RECEIPT_DEVIATIONS: usize = 32;

// ---- The JSON report (`report`) ----

/// Largest JSON report of one run (as printed, pretty). Past it, the largest receipt details are
/// replaced by a stub naming their size and sha256, then the score document, until it fits.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;
/// Characters of one check's evidence line in the JSON report.
pub const MAX_EVIDENCE_CHARS: usize = 1_000;
/// Characters of one string inside a receipt detail in the JSON report.
pub const MAX_RECEIPT_STRING_CHARS: usize = 2_000;
/// Items of one array inside a receipt detail in the JSON report.
pub const MAX_RECEIPT_ITEMS: usize = 100;
/// Rough serialised size of one receipt detail in the JSON report: past it, the rest of its
/// arrays and objects are cut.
pub const MAX_RECEIPT_BYTES: usize = 64 * 1024;
/// Places the report lists as cut (`cuts`); past it, one last line counts the rest.
pub const MAX_REPORT_CUTS: usize = 50;

// ---- MCP servers (`x402::mcp`, `probe::mcp`) ----

/// Nesting depth of one JSON-RPC message from an MCP server (the message is depth 1). Deeper is
/// `mcp.answer.too_deep` and nothing of it is read. A tools/list page with real input schemas
/// nests about 12 deep.
pub const MAX_MCP_JSON_DEPTH: usize = 64;
/// JSON values in one JSON-RPC message from an MCP server. More is `mcp.answer.too_complex` and
/// nothing of it is read. The prober's 1 MiB body cap comes first; this bounds what is built.
pub const MAX_MCP_JSON_VALUES: usize = 200_000;
/// Server-sent events read from one answer while looking for ours; more is
/// `mcp.answer.too_many_events`.
pub const MAX_MCP_SSE_EVENTS: usize = 1_000;
/// Tools read from `tools/list`, all pages together; the rest are counted, not read
/// (`mcp.tools.too_many`, a note).
pub const MAX_MCP_TOOLS: usize = 1_000;
/// `tools/list` pages read (`nextCursor` followed) at most.
pub const MAX_MCP_LIST_PAGES: usize = 4;
/// Tools called unpaid in one run at most (the paid-looking, non-destructive ones first).
pub const MAX_MCP_TOOLS_CALLED: usize = 3;
/// Characters of a tool name; a longer name is not called (a note).
pub const MAX_MCP_TOOL_NAME_CHARS: usize = 128;
/// Levels of a tool's input schema followed when making its arguments; deeper properties get an
/// empty object.
pub const MAX_MCP_ARGUMENT_DEPTH: usize = 8;

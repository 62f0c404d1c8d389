//! The operator file (`/.well-known/x402-operator.json`): wallets, refund rule, revision notes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use x402_probe::evidence::paid::NoteKind;
use x402_probe::x402::operator::{
    MAX_NOTE_TEXT, MAX_NOTES, MAX_OPERATOR_KEYS, parse_operator_file,
};

/// Longest error message: an error names a field and quotes at most a short piece of the file.
const MAX_ERROR_CHARS: usize = 1024;

fuzz_target!(|data: &[u8]| {
    match parse_operator_file(data) {
        Ok(file) => {
            assert!(file.notes.len() <= MAX_NOTES, "{} notes", file.notes.len());
            assert!(file.operator_keys.len() <= MAX_OPERATOR_KEYS);
            for note in &file.notes {
                assert!(note.text.chars().count() <= MAX_NOTE_TEXT);
                if note.kind == NoteKind::PaytoRotation {
                    assert!(note.pay_to.is_some(), "a rotation without its new wallet");
                }
                if let Some(amount) = &note.amount {
                    assert!(!amount.is_empty() && amount.bytes().all(|b| b.is_ascii_digit()));
                }
            }
            if let Some(refund) = &file.refund {
                assert!(refund.within_seconds >= 1);
            }
            // Every wallet is written in the file: at least `{"address":"0x` and 40 hex digits.
            assert!(
                file.wallets.len() * 54 <= data.len(),
                "{} wallets",
                file.wallets.len()
            );
            // What was read round-trips through the form it is stored in.
            let stored = serde_json::to_vec(&file).expect("an operator file serialises");
            let back: x402_probe::evidence::paid::OperatorFile =
                serde_json::from_slice(&stored).expect("and reads back");
            assert_eq!(back, file);
        }
        Err(e) => {
            let chars = e.chars().count();
            assert!(
                chars <= MAX_ERROR_CHARS,
                "an error message of {chars} characters: {}...",
                e.chars().take(200).collect::<String>()
            );
        }
    }
});

//! JSON a store keeps packed: zstd-compressed when that is smaller, else as it is. The two are
//! told apart by zstd's magic number (JSON starts with `{` or `[`), so rows written before
//! packing read as they always did. What a digest names is the JSON, never the packed bytes.

use std::borrow::Cow;

/// The zstd level (fast to write; these rows are rewritten often).
pub(crate) const ZSTD_LEVEL: i32 = 3;

/// The first bytes of a zstd frame.
pub(crate) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A zstd context kept per thread: making one for every row was most of a small row's
/// compression.
pub(crate) type KeptCompressor = std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>>;

thread_local! {
    pub(crate) static PLAIN_COMPRESSOR: KeptCompressor = const { std::cell::RefCell::new(None) };
}

/// `bytes` compressed by this thread's context in `kept` (made by `make` on first use).
pub(crate) fn with_compressor(
    kept: &'static std::thread::LocalKey<KeptCompressor>,
    make: impl FnOnce() -> std::io::Result<zstd::bulk::Compressor<'static>>,
    bytes: &[u8],
) -> std::io::Result<Vec<u8>> {
    kept.with(|cell| {
        let mut cell = cell.borrow_mut();
        let compressor = match cell.as_mut() {
            Some(c) => c,
            None => cell.insert(make()?),
        };
        compressor.compress(bytes)
    })
}

/// `json` as kept: a zstd frame when that is smaller, else the JSON itself.
pub(crate) fn pack(json: &[u8]) -> Vec<u8> {
    let compressed = with_compressor(
        &PLAIN_COMPRESSOR,
        || zstd::bulk::Compressor::new(ZSTD_LEVEL),
        json,
    );
    match compressed {
        Ok(c) if c.len() < json.len() => c,
        _ => json.to_vec(),
    }
}

/// The JSON of `kept`: as it is, or decompressed from a zstd frame, at most `max_bytes` of it
/// (a frame that says it holds more is refused before anything is allocated; one that does not
/// say is read until it ends or passes the limit).
pub(crate) fn unpack(kept: &[u8], max_bytes: usize) -> std::io::Result<Cow<'_, [u8]>> {
    if !kept.starts_with(&ZSTD_MAGIC) {
        return Ok(Cow::Borrowed(kept));
    }
    let too_large = || {
        std::io::Error::other(format!(
            "a packed row of more than the {max_bytes} bytes allowed"
        ))
    };
    match zstd::zstd_safe::get_frame_content_size(kept) {
        Ok(Some(size)) if size <= max_bytes as u64 => {
            zstd::bulk::decompress(kept, size as usize).map(Cow::Owned)
        }
        Ok(Some(_)) => Err(too_large()),
        _ => {
            let mut json = Vec::new();
            let decoder = zstd::stream::read::Decoder::new(kept)?;
            std::io::Read::read_to_end(
                &mut std::io::Read::take(decoder, max_bytes as u64 + 1),
                &mut json,
            )?;
            if json.len() > max_bytes {
                return Err(too_large());
            }
            Ok(Cow::Owned(json))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_json_reads_back_and_plain_json_reads_as_it_is() {
        let json = format!(
            "{{\"cells\":[{}]}}",
            (0..200)
                .map(|i| format!("{{\"check\":\"R3\",\"n\":{i}}}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let kept = pack(json.as_bytes());
        assert!(kept.starts_with(&ZSTD_MAGIC) && kept.len() < json.len() / 4);
        assert_eq!(&*unpack(&kept, 1 << 20).unwrap(), json.as_bytes());
        // Too short to gain: kept as it is, and read as it is.
        assert_eq!(pack(b"{}"), b"{}");
        assert_eq!(&*unpack(b"{}", 1 << 20).unwrap(), b"{}");
        // More than allowed, or a frame cut short: errors.
        assert!(unpack(&kept, json.len() - 1).is_err());
        assert!(unpack(&kept[..kept.len() / 2], 1 << 20).is_err());
        // A frame that does not say its size is read up to the limit.
        let mut unsized_frame = Vec::new();
        {
            let mut encoder = zstd::stream::write::Encoder::new(&mut unsized_frame, 3).unwrap();
            std::io::Write::write_all(&mut encoder, json.as_bytes()).unwrap();
            encoder.finish().unwrap();
        }
        assert!(zstd::zstd_safe::get_frame_content_size(&unsized_frame).is_ok_and(|s| s.is_none()));
        assert_eq!(
            &*unpack(&unsized_frame, json.len()).unwrap(),
            json.as_bytes()
        );
        assert!(unpack(&unsized_frame, json.len() - 1).is_err());
    }
}

//! A journal line's checksum: a CRC32C of the line's bytes before it (the
//! line as serialized, without its closing brace), written as the line's
//! last field (`,"crc":"1a2b3c4d"}`) and verified
//! wherever a line is read back, so a byte changed after the write (a bad
//! sector, a hand edit that keeps the JSON valid) is corrupt with its line
//! instead of being served and replayed as the truth. Lines written before
//! the field existed carry none and still read.

/// What a sealed line ends with, before its eight hex digits and `"}`.
const KEY: &[u8] = b",\"crc\":\"";
/// `KEY`, eight hex digits and the closing `"}`.
pub(crate) const SUFFIX_LEN: usize = KEY.len() + 8 + 2;
const HEX: &[u8; 16] = b"0123456789abcdef";

/// The checksum field that closes a line whose bytes before it sum to
/// `sum`: `KEY`, eight lowercase hex digits, `"}` (ASCII).
fn checksum_field(sum: u32) -> [u8; SUFFIX_LEN] {
    let mut field = [0u8; SUFFIX_LEN];
    field[..KEY.len()].copy_from_slice(KEY);
    for (i, digit) in field[KEY.len()..KEY.len() + 8].iter_mut().enumerate() {
        *digit = HEX[(sum >> (4 * (7 - i))) as usize & 0xf];
    }
    field[SUFFIX_LEN - 2..].copy_from_slice(b"\"}");
    field
}

/// `line` (one JSON object, as serde wrote it) with its checksum as the last
/// field.
pub(crate) fn seal(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() != Some(&b'}') {
        return line;
    }
    line.pop();
    let sum = crc32c::crc32c(&line);
    line.extend_from_slice(&checksum_field(sum));
    line
}

/// Close `line` — one JSON object as serde would write it, all but its
/// closing brace — with its checksum as the last field, its first
/// `summed` bytes summing to `sum` already (the CRC32C continues over the
/// rest alone): the bytes [`seal`] makes of the whole object.
pub(crate) fn seal_open_after(line: &mut String, summed: usize, sum: u32) {
    let field = checksum_field(crc32c::crc32c_append(sum, &line.as_bytes()[summed..]));
    // ASCII by construction: each byte is its char.
    line.extend(field.iter().map(|&b| char::from(b)));
}

/// `line` as it reads without its checksum field (the line a cairn before
/// checksums wrote); a line without one is returned as it is.
pub fn unsealed(line: &str) -> std::borrow::Cow<'_, str> {
    let n = line.len();
    match n > SUFFIX_LEN && line.ends_with("\"}") && line.as_bytes()[n - SUFFIX_LEN..n - 10] == *KEY
    {
        true => format!("{}}}", &line[..n - SUFFIX_LEN]).into(),
        false => line.into(),
    }
}

/// Whether `line` is whole: a line that ends with a checksum field must sum
/// to it; a line without one (written before checksums) passes.
pub fn check_line(line: &[u8]) -> Result<(), String> {
    let n = line.len();
    if n < SUFFIX_LEN + 1 || !line.ends_with(b"\"}") || &line[n - SUFFIX_LEN..n - 10] != KEY {
        return Ok(());
    }
    let mut written = 0u32;
    for &b in &line[n - 10..n - 2] {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return Err("its checksum field is not eight lowercase hex digits".to_string()),
        };
        written = written << 4 | u32::from(digit);
    }
    let sum = crc32c::crc32c(&line[..n - SUFFIX_LEN]);
    match sum == written {
        true => Ok(()),
        false => Err(format!(
            "checksum mismatch: the line says crc {written:08x}, its content sums to {sum:08x} \
             (a byte changed after it was written)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_summed_after_its_start_seals_as_the_whole_line_does() {
        let open = r#"{"session_id":"s","seq":7,"payload":{"text":"héllo"}"#;
        let whole = seal(format!("{open}}}").into_bytes());
        check_line(&whole).unwrap();
        for at in 0..=open.len() {
            let mut after = open.to_string();
            let sum = crc32c::crc32c(&open.as_bytes()[..at]);
            seal_open_after(&mut after, at, sum);
            assert_eq!(after.as_bytes(), whole, "summed after byte {at}");
        }
        // A wrong start's sum seals a line that does not check.
        let mut wrong = open.to_string();
        seal_open_after(&mut wrong, 10, 0);
        assert!(check_line(wrong.as_bytes()).is_err());
    }

    #[test]
    fn a_sealed_line_checks_and_any_changed_byte_does_not() {
        let line = br#"{"seq":12,"payload":{"text":"hello 42"}}"#.to_vec();
        let sealed = seal(line.clone());
        assert!(sealed.starts_with(&line[..line.len() - 1]));
        assert!(sealed.ends_with(b"\"}"));
        check_line(&sealed).unwrap();
        let text = String::from_utf8(sealed.clone()).unwrap();
        assert_eq!(unsealed(&text).as_bytes(), line.as_slice());
        serde_json::from_slice::<serde_json::Value>(&sealed).unwrap();
        for at in 0..sealed.len() - SUFFIX_LEN {
            let mut bad = sealed.clone();
            bad[at] = if bad[at] == b'4' { b'5' } else { b'4' };
            assert!(check_line(&bad).is_err(), "a change at byte {at} passed");
        }
        let mut bad_hex = sealed.clone();
        let n = bad_hex.len();
        bad_hex[n - 3] = b'Z';
        assert!(check_line(&bad_hex).unwrap_err().contains("hex"));
    }

    #[test]
    fn a_line_without_a_checksum_still_reads() {
        check_line(br#"{"seq":1,"payload":{}}"#).unwrap();
        check_line(b"").unwrap();
    }
}

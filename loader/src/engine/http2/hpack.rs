//! HPACK (RFC 7541) for the io_uring HTTP/2 shards: requests' header blocks encoded once
//! ([`encode_block`]), and answers' decoded — the static and dynamic tables, integers and
//! string literals; Huffman-coded strings are `httlib-huffman`'s (table-driven,
//! four bits a step).
//!
//! Why not a whole HPACK crate: `loona-hpack` (and `hpack`, which it forks) builds a hash map
//! of the Huffman code for every Huffman string it decodes and looks up each bit in it — 60 %
//! of the shard's CPU against nginx at 10,000 req/s, measured; `h2`'s decoder is not public.
//! This one copies only what it must (a literal's name and value, into buffers it reuses) and
//! hands every field to a callback.

use std::collections::VecDeque;

/// RFC 7541 Appendix A.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The dynamic table size the loader allows (SETTINGS_HEADER_TABLE_SIZE, left at its default).
const TABLE_LIMIT: usize = 4096;

/// Why a header block could not be decoded (a connection error: the tables are out of step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HpackError(pub &'static str);

/// A dynamic table entry: name, value (empty when its name is not wanted: only its size
/// counts) and its size as RFC 7541 §4.1 counts it.
type Entry = (Box<[u8]>, Box<[u8]>, usize);

/// Huffman strings whose decoded length the decoder remembers (see `Decoder::lengths`).
const LENGTHS_KEPT: usize = 8;

/// One connection's decoder.
#[derive(Debug)]
pub struct Decoder {
    /// Newest first.
    table: VecDeque<Entry>,
    size: usize,
    max: usize,
    name: Vec<u8>,
    value: Vec<u8>,
    /// The decoded length of recent Huffman strings of fields that enter the table under a
    /// name nobody asked for, by their coded bytes: only the length counts there (the
    /// table's size), and a server repeats them (nginx indexes `server`, `date`,
    /// `content-type` and `content-length` in every answer), so each is decoded once.
    lengths: Vec<(Box<[u8]>, usize)>,
    next_length: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: TABLE_LIMIT,
            name: Vec::new(),
            value: Vec::new(),
            lengths: Vec::new(),
            next_length: 0,
        }
    }
}

impl Decoder {
    /// Decode one whole header block, handing each field to `field(name, value)`.
    #[cfg(test)]
    pub fn decode(&mut self, block: &[u8], field: impl FnMut(&[u8], &[u8])) -> Result<(), HpackError> {
        self.decode_some(block, |_| true, field)
    }

    /// As `decode`, but only fields whose name `wanted` accepts are handed on; the others'
    /// values are not decoded (an answer's `date`, `server`, `content-type`: most of the
    /// Huffman decoding there is) — of one that enters the table only its length is
    /// taken, once for each distinct coded string.
    pub fn decode_some(
        &mut self,
        block: &[u8],
        wanted: impl Fn(&[u8]) -> bool,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut at = 0;
        while at < block.len() {
            let first = block[at];
            if first & 0x80 != 0 {
                let index = integer(block, &mut at, 7)?;
                let (name, value) = self.get(index)?;
                if wanted(name) {
                    field(name, value);
                }
            } else if first & 0x20 != 0 && first & 0x40 == 0 {
                let size = integer(block, &mut at, 5)?;
                if size > TABLE_LIMIT {
                    return Err(HpackError("a dynamic table size update above the limit"));
                }
                self.max = size;
                self.evict(0);
            } else {
                let indexing = first & 0x40 != 0;
                let index = integer(block, &mut at, if indexing { 6 } else { 4 })?;
                let mut name = std::mem::take(&mut self.name);
                name.clear();
                if index == 0 {
                    string(block, &mut at, &mut name)?;
                } else {
                    name.extend_from_slice(self.get(index)?.0);
                }
                if !wanted(&name) {
                    if indexing {
                        let len = self.length(block, &mut at)?;
                        self.insert(&name, &[], name.len() + len + 32);
                    } else {
                        literal(block, &mut at)?;
                    }
                    self.name = name;
                    continue;
                }
                let mut value = std::mem::take(&mut self.value);
                value.clear();
                string(block, &mut at, &mut value)?;
                field(&name, &value);
                if indexing {
                    self.insert(&name, &value, name.len() + value.len() + 32);
                }
                self.name = name;
                self.value = value;
            }
        }
        Ok(())
    }

    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError("index 0")),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self
                .table
                .get(index - 62)
                .map(|(n, v, _)| (&**n, &**v))
                .ok_or(HpackError("an index past the dynamic table")),
        }
    }

    /// The decoded length of the string literal at `block[*at]`, stepping over it.
    fn length(&mut self, block: &[u8], at: &mut usize) -> Result<usize, HpackError> {
        let (huffman, coded) = literal(block, at)?;
        if !huffman {
            return Ok(coded.len());
        }
        if let Some(&(_, len)) = self.lengths.iter().find(|(c, _)| **c == *coded) {
            return Ok(len);
        }
        let mut value = std::mem::take(&mut self.value);
        value.clear();
        huffman_decode(coded, &mut value)?;
        let len = value.len();
        self.value = value;
        let kept = (coded.into(), len);
        if self.lengths.len() < LENGTHS_KEPT {
            self.lengths.push(kept);
        } else {
            self.lengths[self.next_length] = kept;
            self.next_length = (self.next_length + 1) % LENGTHS_KEPT;
        }
        Ok(len)
    }

    /// Add a field of `size` (RFC 7541 §4.1) to the table.
    fn insert(&mut self, name: &[u8], value: &[u8], size: usize) {
        if size > self.max {
            // Larger than the whole table: it empties the table (RFC 7541 §4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.table.push_front((name.into(), value.into(), size));
        self.size += size;
    }

    /// Evict the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((_, _, size)) = self.table.pop_back() else { break };
            self.size -= size;
        }
    }
}

/// An integer with an `n`-bit prefix at `block[*at]` (RFC 7541 §5.1).
fn integer(block: &[u8], at: &mut usize, n: u32) -> Result<usize, HpackError> {
    let mask = (1usize << n) - 1;
    let mut value = usize::from(block[*at]) & mask;
    *at += 1;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let b = *block.get(*at).ok_or(HpackError("an integer cut short"))?;
        *at += 1;
        if shift > 21 {
            return Err(HpackError("an integer too large"));
        }
        value += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// The string literal at `block[*at]` (RFC 7541 §5.2), stepped over: whether it is
/// Huffman-coded, and its bytes as they stand in the block.
fn literal<'b>(block: &'b [u8], at: &mut usize) -> Result<(bool, &'b [u8]), HpackError> {
    let huffman = *block.get(*at).ok_or(HpackError("a string missing"))? & 0x80 != 0;
    let len = integer(block, at, 7)?;
    let bytes = block.get(*at..*at + len).ok_or(HpackError("a string longer than the block"))?;
    *at += len;
    Ok((huffman, bytes))
}

/// A string literal at `block[*at]`, appended to `out`.
fn string(block: &[u8], at: &mut usize, out: &mut Vec<u8>) -> Result<(), HpackError> {
    match literal(block, at)? {
        (true, coded) => huffman_decode(coded, out),
        (false, bytes) => {
            out.extend_from_slice(bytes);
            Ok(())
        }
    }
}

/// The Huffman-coded string `coded` (RFC 7541 §5.2), decoded, appended to `out`.
fn huffman_decode(coded: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    httlib_huffman::decode(coded, out, httlib_huffman::DecoderSpeed::FourBits)
        .map_err(|_| HpackError("a Huffman string that does not decode"))
}

/// A request's header block (HPACK, RFC 7541), encoded once: pseudo-headers first, from the
/// static table where it has the field, then literals without indexing, so no block changes
/// the server's dynamic table and every stream can send the same bytes.
pub fn encode_block<'a>(
    method: &str,
    scheme: &str,
    authority: &str,
    path: &str,
    headers: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<u8> {
    let mut block = Vec::with_capacity(64);
    match method {
        "GET" => block.push(0x82),
        "POST" => block.push(0x83),
        _ => put_literal_indexed_name(&mut block, 2, method.as_bytes()),
    }
    match scheme {
        "https" => block.push(0x87),
        _ => block.push(0x86),
    }
    match path {
        "/" => block.push(0x84),
        _ => put_literal_indexed_name(&mut block, 4, path.as_bytes()),
    }
    put_literal_indexed_name(&mut block, 1, authority.as_bytes());
    for (name, value) in headers {
        block.push(0x00);
        put_string(&mut block, name.as_bytes());
        put_string(&mut block, value);
    }
    block
}

/// A literal header field without indexing whose name is static table entry `index`.
fn put_literal_indexed_name(block: &mut Vec<u8>, index: usize, value: &[u8]) {
    put_integer(block, 0x00, 4, index);
    put_string(block, value);
}

/// A string literal, not Huffman-coded.
fn put_string(block: &mut Vec<u8>, s: &[u8]) {
    put_integer(block, 0x00, 7, s.len());
    block.extend_from_slice(s);
}

/// An HPACK integer with an `n`-bit prefix after the bits `first`.
fn put_integer(block: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        block.push(first | value as u8);
        return;
    }
    block.push(first | max as u8);
    value -= max;
    while value >= 128 {
        block.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    block.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        d.decode(block, |n, v| {
            out.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
        })
        .unwrap();
        out
    }

    #[test]
    fn the_static_table_is_the_rfcs() {
        // Every static field, encoded by another implementation, decodes to itself.
        let mut encoder = loona_hpack::Encoder::new();
        for (name, value) in STATIC {
            let block = encoder.encode([(name, value)]);
            let mut d = Decoder::default();
            let got = decode(&mut d, &block);
            assert_eq!(got, vec![(String::from_utf8_lossy(name).into(), String::from_utf8_lossy(value).into())]);
        }
    }

    #[test]
    fn blocks_of_another_encoder_decode_over_a_connection() {
        let mut encoder = loona_hpack::Encoder::new();
        let mut d = Decoder::default();
        let long = "v".repeat(3000);
        let answers: Vec<Vec<(&[u8], &[u8])>> = vec![
            vec![(b":status", b"200"), (b"server", b"nginx"), (b"x-id", b"1")],
            vec![(b":status", b"503"), (b"server", b"nginx"), (b"x-id", b"2"), (b"x-long", long.as_bytes())],
            vec![(b":status", b"200"), (b"x-other", long.as_bytes()), (b"x-id", b"1")],
        ];
        for fields in answers {
            let block = encoder.encode(fields.iter().copied());
            let got = decode(&mut d, &block);
            let want: Vec<(String, String)> = fields
                .iter()
                .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
                .collect();
            assert_eq!(got, want);
        }
        assert!(d.size <= TABLE_LIMIT);
    }

    #[test]
    fn huffman_strings_and_indexed_names() {
        // :status 200, then date (static name 33) with a Huffman value, with indexing, then
        // the same field by its new dynamic index 62.
        let date = b"Fri, 04 Dec 2026 01:00:00 GMT";
        let mut coded = Vec::new();
        httlib_huffman::encode(date, &mut coded).unwrap();
        let mut block = vec![0x88, 0x40 | 33];
        assert!(coded.len() < 127);
        block.push(0x80 | coded.len() as u8);
        block.extend(&coded);
        block.push(0x80 | 62);
        let mut d = Decoder::default();
        let got = decode(&mut d, &block);
        assert_eq!(got[0], (":status".into(), "200".into()));
        assert_eq!(got[1], ("date".into(), String::from_utf8_lossy(date).into_owned()));
        assert_eq!(got[2], got[1]);
        // Skipped when not wanted and not indexed: the rest of the block still decodes.
        let mut block = vec![0x0f, 33 - 15, 0x80 | coded.len() as u8];
        block.extend(&coded);
        block.push(0x88);
        let mut d = Decoder::default();
        let mut got = Vec::new();
        d.decode_some(&block, |n| n != b"date", |n, v| got.push((n.to_vec(), v.to_vec()))).unwrap();
        assert_eq!(got, vec![(b":status".to_vec(), b"200".to_vec())]);
    }

    #[test]
    fn unwanted_fields_that_enter_the_table_keep_it_in_step_undecoded() {
        // nginx's way: every answer indexes `server` and `date` (Huffman values), so the
        // table fills and evicts; a decoder that wants only :status must count the same
        // sizes as one that decodes everything, and find the same field at each index.
        let huffman = |v: &[u8]| {
            let mut coded = Vec::new();
            httlib_huffman::encode(v, &mut coded).unwrap();
            let mut out = vec![0x80 | coded.len() as u8];
            out.extend(coded);
            out
        };
        let (mut all, mut some) = (Decoder::default(), Decoder::default());
        for second in 0..200 {
            let mut block = vec![0x88, 0x40 | 54];
            block.extend(huffman(b"nginx"));
            block.push(0x40 | 33);
            block.extend(huffman(format!("Fri, 04 Dec 2026 01:{:02}:{:02} GMT", second / 60, second % 60).as_bytes()));
            block.extend([0x40 | 28, 0x02, b'1', b'1']); // content-length, not Huffman
            block.push(0x80 | 63); // the newest `date` but one (`content-length` is 62)
            let mut full = Vec::new();
            all.decode(&block, |n, v| full.push((n.to_vec(), v.to_vec()))).unwrap();
            let mut statuses = Vec::new();
            some.decode_some(&block, |n| n == b":status", |n, v| statuses.push((n.to_vec(), v.to_vec()))).unwrap();
            assert_eq!(statuses, vec![(b":status".to_vec(), b"200".to_vec())]);
            assert_eq!((some.size, some.table.len()), (all.size, all.table.len()), "block {second}");
            assert_eq!(full[4].0, b"date");
        }
        assert!(all.table.len() < 3 * 200, "the table evicted");
        assert!(some.lengths.len() <= LENGTHS_KEPT);
        // A broken Huffman string is an error whether or not its field is wanted.
        let block = [0x40 | 33, 0x81, 0xff];
        assert!(Decoder::default().decode_some(&block, |_| false, |_, _| {}).is_err());
    }

    #[test]
    fn broken_blocks_are_errors_not_panics() {
        let cases: [&[u8]; 7] = [
            &[0x80],                         // index 0
            &[0xff, 0xff, 0xff, 0xff, 0x0f], // an index far past the table
            &[0xbf],                         // dynamic index 63 of an empty table (0x80|63)
            &[0x00, 0x05, b'a'],             // a name longer than the block
            &[0x3f, 0xe1, 0xff, 0x03],       // a size update above 4096
            &[0x7f],                         // an integer cut short
            &[0x00, 0x81, 0xff, 0x00],       // a Huffman string with an EOS-like tail
        ];
        for block in cases {
            let mut d = Decoder::default();
            assert!(d.decode(block, |_, _| {}).is_err(), "{block:x?}");
        }
    }
}

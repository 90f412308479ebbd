//! Finding (or mounting) tracefs and reading a tracepoint's record layout from its `format`
//! file.
//!
//! Owns: the choice of tracefs directory (the same rule aya uses when it attaches, so both
//! look at the same tree), mounting tracefs when no tree is there, and parsing `format`.
//! Does not: attach anything (aya does), or decide what a missing tracepoint means.

use std::{
    collections::BTreeMap,
    ffi::CString,
    fs, io,
    path::{Path, PathBuf},
};

use probes_ebpf::{
    KfreeSkbLayout, NO_FIELD, SchedSwitchLayout, SchedWakeupLayout, SetStateLayout, SockEventLayout, TcpProbeLayout,
};

/// Where tracefs is usually mounted, in aya's order of preference.
const TRACEFS: &str = "/sys/kernel/tracing";
/// The older location, under debugfs.
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// A usable tracefs tree, and whether this process had to mount it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tracefs {
    /// The directory holding `events/`.
    pub(crate) root: PathBuf,
    /// True when tracefs was not mounted and this call mounted it (it stays mounted: other
    /// tools expect it there, and a second run should not pay for it again).
    pub(crate) mounted_now: bool,
}

/// The tracefs tree aya will use: `/sys/kernel/tracing` or `/sys/kernel/debug/tracing`,
/// whichever exists and is not empty (an empty `/sys/kernel/tracing` is an unmounted
/// mountpoint). When neither is, mount tracefs on `/sys/kernel/tracing`, like
/// `mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing`.
pub(crate) fn find_or_mount() -> Result<Tracefs, String> {
    if let Some(root) = [TRACEFS, DEBUGFS_TRACING].into_iter().map(Path::new).find(|p| non_empty_dir(p)) {
        return Ok(Tracefs { root: root.to_path_buf(), mounted_now: false });
    }
    mount_tracefs(Path::new(TRACEFS))
        .map_err(|err| format!("tracefs is not mounted and `mount -t tracefs tracefs {TRACEFS}` failed: {err}"))?;
    if non_empty_dir(Path::new(TRACEFS)) {
        Ok(Tracefs { root: PathBuf::from(TRACEFS), mounted_now: true })
    } else {
        Err(format!("mounted tracefs on {TRACEFS} but it is empty"))
    }
}

fn non_empty_dir(path: &Path) -> bool {
    fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_some())
}

fn mount_tracefs(target: &Path) -> io::Result<()> {
    let source = c"tracefs";
    let fstype = c"tracefs";
    let target = CString::new(target.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call; no data.
    let rc = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The `format` file of `category:name` under `tracefs`.
pub(crate) fn format_path(tracefs: &Path, category: &str, name: &str) -> PathBuf {
    tracefs.join("events").join(category).join(name).join("format")
}

/// One `field:` line of a format file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    /// The C declaration without the name (`const void *`, `__u8`, `int`).
    pub(crate) c_type: String,
    /// The field name, without any `[N]` suffix.
    pub(crate) name: String,
    /// Byte offset in the record.
    pub(crate) offset: u32,
    /// Byte size.
    pub(crate) size: u32,
}

/// Parse every `field:TYPE NAME; offset:N; size:N; signed:N;` line of a format file.
pub(crate) fn parse_fields(format: &str) -> Vec<Field> {
    format.lines().filter_map(parse_field).collect()
}

fn parse_field(line: &str) -> Option<Field> {
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    for part in line.trim().split(';') {
        let part = part.trim();
        if let Some(rest) = part.strip_prefix("field:") {
            decl = Some(rest.trim());
        } else if let Some(rest) = part.strip_prefix("offset:") {
            offset = rest.trim().parse().ok();
        } else if let Some(rest) = part.strip_prefix("size:") {
            size = rest.trim().parse().ok();
        }
    }
    let decl = decl?;
    // The name is the last identifier: `__u8 saddr[4]` → `saddr`, `const void * skaddr` → `skaddr`.
    let without_array = decl.split('[').next()?.trim_end();
    let split = without_array.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    let name = &without_array[split + 1..];
    let c_type = without_array[..=split].trim();
    if name.is_empty() {
        return None;
    }
    Some(Field { c_type: c_type.to_owned(), name: name.to_owned(), offset: offset?, size: size? })
}

/// The field `name` of `fields`, checked to be one of `sizes` bytes.
fn field<'a>(fields: &'a [Field], name: &str, sizes: &[u32]) -> Result<&'a Field, String> {
    let field = fields.iter().find(|f| f.name == name).ok_or_else(|| format!("no field `{name}`"))?;
    if sizes.contains(&field.size) {
        Ok(field)
    } else {
        Err(format!("field `{name}` is {} bytes, expected {sizes:?}", field.size))
    }
}

/// The layout of `sock:inet_sock_set_state` from its format file text, checked against what
/// the kernel program reads: an 8-byte `skaddr`, 4-byte states and a 1- or 2-byte protocol.
pub(crate) fn set_state_layout(format: &str) -> Result<SetStateLayout, String> {
    let fields = parse_fields(format);
    let skaddr = field(&fields, "skaddr", &[8])?;
    let oldstate = field(&fields, "oldstate", &[4])?;
    let newstate = field(&fields, "newstate", &[4])?;
    let protocol = field(&fields, "protocol", &[1, 2])?;
    Ok(SetStateLayout {
        skaddr: skaddr.offset,
        oldstate: oldstate.offset,
        newstate: newstate.offset,
        protocol: protocol.offset,
        protocol_size: protocol.size,
    })
}

/// The layout of a socket tracepoint (`tcp:tcp_retransmit_skb`, `tcp_receive_reset`,
/// `tcp_send_reset`): an 8-byte `skaddr`, and a 4-byte `state` when `with_state`.
pub(crate) fn sock_event_layout(format: &str, with_state: bool) -> Result<SockEventLayout, String> {
    let fields = parse_fields(format);
    let skaddr = field(&fields, "skaddr", &[8])?.offset;
    let state = if with_state { field(&fields, "state", &[4])?.offset } else { NO_FIELD };
    Ok(SockEventLayout { skaddr, state })
}

/// The layout of `tcp:tcp_probe`: a 2-byte `data_len` and an 8-byte `sock_cookie`.
pub(crate) fn tcp_probe_layout(format: &str) -> Result<TcpProbeLayout, String> {
    let fields = parse_fields(format);
    let data_len = field(&fields, "data_len", &[2])?.offset;
    let sock_cookie = field(&fields, "sock_cookie", &[8])?.offset;
    Ok(TcpProbeLayout { data_len, sock_cookie })
}

/// The layout of `skb:kfree_skb`: an 8-byte `rx_sk` (Linux 6.11+) and a 4-byte `reason`.
pub(crate) fn kfree_skb_layout(format: &str) -> Result<KfreeSkbLayout, String> {
    let fields = parse_fields(format);
    let rx_sk = field(&fields, "rx_sk", &[8])
        .map_err(|err| format!("{err} (kernels before 6.11 do not say which socket a dropped packet was for)"))?
        .offset;
    let reason = field(&fields, "reason", &[4])?.offset;
    Ok(KfreeSkbLayout { rx_sk, reason })
}

/// The layout of `sched:sched_wakeup` / `sched_wakeup_new`: a 4-byte `pid`.
pub(crate) fn sched_wakeup_layout(format: &str) -> Result<SchedWakeupLayout, String> {
    let fields = parse_fields(format);
    Ok(SchedWakeupLayout { pid: field(&fields, "pid", &[4])?.offset })
}

/// The layout of `sched:sched_switch`: 4-byte pids, a 4- or 8-byte `prev_state`.
pub(crate) fn sched_switch_layout(format: &str) -> Result<SchedSwitchLayout, String> {
    let fields = parse_fields(format);
    let prev_state = field(&fields, "prev_state", &[4, 8])?;
    Ok(SchedSwitchLayout {
        prev_pid: field(&fields, "prev_pid", &[4])?.offset,
        prev_state: prev_state.offset,
        prev_state_size: prev_state.size,
        next_pid: field(&fields, "next_pid", &[4])?.offset,
    })
}

/// The symbolic names `print fmt` gives the values of `REC-><field>`
/// (`__print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, …)`), e.g. `enum skb_drop_reason`.
/// Empty when the format prints the field as a number.
pub(crate) fn symbolic_names(format: &str, field: &str) -> BTreeMap<u32, String> {
    let mut names = BTreeMap::new();
    let needle = format!("__print_symbolic(REC->{field},");
    let Some(start) = format.find(&needle) else {
        return names;
    };
    let mut rest = &format[start + needle.len()..];
    // Pairs `{ N, "NAME" }` until the closing parenthesis of __print_symbolic.
    while let Some(open) = rest.find(['{', ')']) {
        if rest[open..].starts_with(')') {
            break;
        }
        let Some(close) = rest[open..].find('}') else { break };
        let pair = &rest[open + 1..open + close];
        if let Some((value, name)) = pair.split_once(',')
            && let Ok(value) = value.trim().parse::<u32>()
        {
            names.insert(value, name.trim().trim_matches('"').to_owned());
        }
        rest = &rest[open + close + 1..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/sys/kernel/tracing/events/sock/inet_sock_set_state/format` on Linux 6.18.
    const FORMAT_6_18: &str = "name: inet_sock_set_state
ID: 2287
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:const void * skaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int oldstate;\toffset:16;\tsize:4;\tsigned:1;
\tfield:int newstate;\toffset:20;\tsize:4;\tsigned:1;
\tfield:__u16 sport;\toffset:24;\tsize:2;\tsigned:0;
\tfield:__u16 dport;\toffset:26;\tsize:2;\tsigned:0;
\tfield:__u16 family;\toffset:28;\tsize:2;\tsigned:0;
\tfield:__u16 protocol;\toffset:30;\tsize:2;\tsigned:0;
\tfield:__u8 saddr[4];\toffset:32;\tsize:4;\tsigned:0;
\tfield:__u8 daddr[4];\toffset:36;\tsize:4;\tsigned:0;
\tfield:__u8 saddr_v6[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:__u8 daddr_v6[16];\toffset:56;\tsize:16;\tsigned:0;

print fmt: \"family=%s protocol=%s\", REC->family, REC->protocol
";

    /// The 4.16–5.0 shape: no `family`, `protocol` a `__u8` at 28.
    const FORMAT_4_16: &str = "format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:const void * skaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int oldstate;\toffset:16;\tsize:4;\tsigned:1;
\tfield:int newstate;\toffset:20;\tsize:4;\tsigned:1;
\tfield:__u16 sport;\toffset:24;\tsize:2;\tsigned:0;
\tfield:__u16 dport;\toffset:26;\tsize:2;\tsigned:0;
\tfield:__u8 protocol;\toffset:28;\tsize:1;\tsigned:0;
\tfield:__u8 saddr[4];\toffset:29;\tsize:4;\tsigned:0;
";

    #[test]
    fn parses_the_6_18_layout() {
        assert_eq!(set_state_layout(FORMAT_6_18), Ok(SetStateLayout::LINUX_5_1));
    }

    #[test]
    fn parses_the_pre_5_1_layout() {
        let layout = set_state_layout(FORMAT_4_16).unwrap();
        assert_eq!((layout.protocol, layout.protocol_size), (28, 1));
    }

    #[test]
    fn field_names_and_types() {
        let fields = parse_fields(FORMAT_6_18);
        assert_eq!(fields.len(), 15);
        let skaddr = fields.iter().find(|f| f.name == "skaddr").unwrap();
        assert_eq!((skaddr.c_type.as_str(), skaddr.offset, skaddr.size), ("const void *", 8, 8));
        let saddr = fields.iter().find(|f| f.name == "saddr_v6").unwrap();
        assert_eq!((saddr.c_type.as_str(), saddr.offset, saddr.size), ("__u8", 40, 16));
    }

    #[test]
    fn reads_the_other_tracepoints_of_6_18() {
        // Abridged format files of Linux 6.18 (this machine).
        let retransmit = "\tfield:const void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:const void * skaddr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int state;\toffset:24;\tsize:4;\tsigned:1;";
        assert_eq!(sock_event_layout(retransmit, true), Ok(SockEventLayout::RETRANSMIT_6_18));
        let receive_reset = "\tfield:const void * skaddr;\toffset:8;\tsize:8;\tsigned:0;";
        assert_eq!(sock_event_layout(receive_reset, false), Ok(SockEventLayout::RECEIVE_RESET_6_18));
        let kfree_skb = "\tfield:void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;
\tfield:void * rx_sk;\toffset:24;\tsize:8;\tsigned:0;
\tfield:unsigned short protocol;\toffset:32;\tsize:2;\tsigned:0;
\tfield:enum skb_drop_reason reason;\toffset:36;\tsize:4;\tsigned:0;

print fmt: \"skbaddr=%p rx_sk=%p protocol=%u location=%pS reason: %s\", REC->skbaddr, REC->rx_sk, REC->protocol, REC->location, __print_symbolic(REC->reason, { 2, \"NOT_SPECIFIED\" }, { 3, \"NO_SOCKET\" }, { 128, \"MAX\" })";
        assert_eq!(kfree_skb_layout(kfree_skb), Ok(KfreeSkbLayout::LINUX_6_18));
        let names = symbolic_names(kfree_skb, "reason");
        assert_eq!(names.get(&3).map(String::as_str), Some("NO_SOCKET"));
        assert_eq!(names.len(), 3);
        assert!(kfree_skb_layout(&kfree_skb.replace("rx_sk;", "other;")).unwrap_err().contains("6.11"));
        let switch = "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;";
        assert_eq!(sched_switch_layout(switch), Ok(SchedSwitchLayout::LINUX_6_18));
        let wakeup = "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;";
        assert_eq!(sched_wakeup_layout(wakeup), Ok(SchedWakeupLayout::LINUX_6_18));
    }

    #[test]
    fn rejects_unexpected_sizes_and_missing_fields() {
        let narrow = FORMAT_6_18.replace("skaddr;\toffset:8;\tsize:8", "skaddr;\toffset:8;\tsize:4");
        assert!(set_state_layout(&narrow).unwrap_err().contains("skaddr"));
        assert!(set_state_layout("format:\n").unwrap_err().contains("no field"));
    }
}

//! The Kubernetes manifests (`deploy/loader-job.yaml`), checked offline: against the
//! Kubernetes API schemas by `kubernetes-validate` (PyPI, installed by `cargo xtask setup`
//! under `target/py-tools`), strictly (an unknown field is an error), and for what a sharded
//! run needs of them (docs/distributed.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The Kubernetes version the manifests are checked against (Indexed Jobs are GA from 1.24).
const KUBERNETES: &str = "1.30.0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// `target/py-tools`, where setup installs the validator; `None` (after saying so) outside
/// CI when it is missing.
fn tools() -> Option<PathBuf> {
    let dir = root().join("target/py-tools");
    if dir.join("kubernetes_validate").is_dir() {
        return Some(dir);
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must have kubernetes-validate (cargo xtask setup)");
    eprintln!("skipped: kubernetes-validate is not installed in {} (cargo xtask setup)", dir.display());
    None
}

fn python(tools: &Path, args: &[&str]) -> Output {
    Command::new("python3").env("PYTHONPATH", tools).args(args).output().expect("python3")
}

fn validate(tools: &Path, file: &Path) -> Output {
    python(tools, &["-m", "kubernetes_validate", "--strict", "-k", KUBERNETES, file.to_str().unwrap()])
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn the_job_passes_the_kubernetes_schemas_strictly() {
    let Some(tools) = tools() else { return };
    let job = root().join("deploy/loader-job.yaml");
    let out = validate(&tools, &job);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    for kind in ["service/loader", "persistentvolumeclaim/loader-results", "job/loader-run"] {
        assert!(said.contains(&format!("passed for resource {kind}")), "{kind}: {said}");
    }
    assert!(!said.contains("ERROR"), "{said}");
    // The check can fail: a misspelt field is refused.
    let bad = std::env::temp_dir().join(format!("loader-job-bad-{}.yaml", std::process::id()));
    let yaml = std::fs::read_to_string(&job).unwrap().replace("  parallelism: 4", "  paralelism: 4");
    std::fs::write(&bad, yaml).unwrap();
    let said = text(&validate(&tools, &bad));
    let _ = std::fs::remove_file(&bad);
    assert!(said.contains("'paralelism' was unexpected"), "{said}");
}

#[test]
fn the_job_runs_one_shard_per_node_with_the_probes_capabilities_only() {
    let Some(tools) = tools() else { return };
    // PyYAML comes with kubernetes-validate.
    let check = r#"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
job = next(d for d in docs if d["kind"] == "Job")
spec, pod = job["spec"], job["spec"]["template"]["spec"]
c = pod["containers"][0]
env = {e["name"]: e for e in c["env"]}
assert spec["completionMode"] == "Indexed", "Indexed"
assert spec["completions"] == spec["parallelism"] == int(env["JOB_COMPLETIONS"]["value"]), "JOB_COMPLETIONS = completions = parallelism"
args = c["args"]
assert args[0] == "run" and "--start-at" in args and "--control" in args, args
assert any("$(JOB_COMPLETION_INDEX)" in a for a in args), "per-shard output directory"
assert env["LOADER_CONTROL_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "loader-control"
caps = c["securityContext"]["capabilities"]
assert caps["drop"] == ["ALL"] and sorted(caps["add"]) == ["BPF", "PERFMON", "SYS_RESOURCE"], caps
assert c["securityContext"]["privileged"] is False and c["securityContext"]["allowPrivilegeEscalation"] is False
assert pod["hostPID"] is True, "the probes filter by the host's pid"
terms = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
assert terms[0]["topologyKey"] == "kubernetes.io/hostname", "one pod per node"
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
assert mounts["/sys/kernel/tracing"]["readOnly"] is True
assert c["resources"]["requests"]["cpu"] == c["resources"]["limits"]["cpu"], "whole cores, no throttling quota below the request"
svc = next(d for d in docs if d["kind"] == "Service")
assert svc["spec"]["clusterIP"] == "None" and pod["subdomain"] == svc["metadata"]["name"], "stable pod names for loader stop"
print("ok")
"#;
    let job = root().join("deploy/loader-job.yaml");
    let out = python(&tools, &["-c", check, job.to_str().unwrap()]);
    assert!(out.status.success() && text(&out).trim() == "ok", "{}", text(&out));
}

//! What Tekton does with `deploy/tekton/*.yaml` before a container starts,
//! for the tests that run those Tasks without a cluster (tests/system/deploy.rs
//! with this machine's shell, tests/system/container.rs with podman and the tool's
//! image): a Pipeline's matrix expanded into cells, each cell's Task
//! params (defaults filled), the variables substituted (`$(params.x)`,
//! `$(params.x[*])` in args, `$(workspaces.w.path|bound)`,
//! `$(results.r.path)`), the stepTemplate merged into each step, and
//! step `when` expressions (`in`/`notin`) evaluated (Tekton Pipelines
//! docs/tasks.md, docs/variables.md, docs/matrix.md).
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The YAML documents of `file`, as JSON (PyYAML in the deploy venv).
pub fn load(file: &Path) -> Vec<Value> {
    let py = venv_bin().join("python3");
    let out = super::must(Command::new(py).args([
        "-c",
        "import json,sys,yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], sys.stdout)",
    ]).arg(file));
    serde_json::from_str(&out).unwrap()
}

/// deploy/test/venv.sh's bin directory (made once, cached).
pub fn venv_bin() -> PathBuf {
    static V: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let s = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/test/venv.sh");
        PathBuf::from(super::must(&mut Command::new(s)))
    })
    .clone()
}

/// A param value: a string or an array.
#[derive(Clone, Debug, PartialEq)]
pub enum P {
    S(String),
    A(Vec<String>),
}

impl P {
    fn of(v: &Value) -> P {
        match v {
            Value::Array(a) => P::A(a.iter().map(|x| x.as_str().unwrap().to_string()).collect()),
            Value::String(s) => P::S(s.clone()),
            other => panic!("param value {other} is neither a string nor an array"),
        }
    }
}

pub type Params = BTreeMap<String, P>;

/// `text` with `$(params.x)` (strings) and the given other variables
/// substituted. An array param whole (`$(params.x[*])`) is only allowed
/// as a whole argument: [`args`] expands it.
pub fn subst(text: &str, params: &Params, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("$(") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(')').map(|e| i + e).expect("unclosed $(");
        let name = &rest[i + 2..end];
        let value = if let Some(p) = name.strip_prefix("params.") {
            match params.get(p) {
                Some(P::S(s)) => s.clone(),
                Some(P::A(_)) => panic!("array param {p} used as a string in {text:?}"),
                None => panic!("$(params.{p}) names no param (in {text:?})"),
            }
        } else {
            vars.get(name)
                .unwrap_or_else(|| panic!("$({name}) is not a variable here (in {text:?})"))
                .clone()
        };
        out.push_str(&value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A list of arguments, `$(params.x[*])` expanded in place.
pub fn args(list: &Value, params: &Params, vars: &BTreeMap<String, String>) -> Vec<String> {
    let mut v = Vec::new();
    for a in list.as_array().into_iter().flatten() {
        let a = a.as_str().unwrap();
        if let Some(name) = a
            .strip_prefix("$(params.")
            .and_then(|x| x.strip_suffix("[*])"))
        {
            match params.get(name) {
                Some(P::A(items)) => v.extend(items.iter().cloned()),
                other => panic!("$(params.{name}[*]) is not an array param: {other:?}"),
            }
        } else {
            v.push(subst(a, params, vars));
        }
    }
    v
}

/// A Task's params: its defaults, then `given` (each must be declared;
/// each without a default must be given).
pub fn task_params(task: &Value, given: &Params) -> Params {
    let mut p = Params::new();
    let declared = task["spec"]["params"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for d in &declared {
        let name = d["name"].as_str().unwrap();
        if let Some(v) = given.get(name) {
            p.insert(name.to_string(), v.clone());
        } else if !d["default"].is_null() {
            p.insert(name.to_string(), P::of(&d["default"]));
        } else {
            panic!(
                "Task {} param {name} has no default and is not given",
                task["metadata"]["name"]
            );
        }
    }
    for k in given.keys() {
        assert!(
            declared.iter().any(|d| d["name"] == k.as_str()),
            "Task {} declares no param {k}",
            task["metadata"]["name"]
        );
    }
    p
}

/// The cells of a pipeline task's matrix: each combination of its matrix
/// params (in order), with its plain params, given the Pipeline's params.
pub fn cells(pipeline_task: &Value, pipeline_params: &Params) -> Vec<Params> {
    let vars = BTreeMap::new();
    let mut base = Params::new();
    for p in pipeline_task["params"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap().to_string();
        let v = match &p["value"] {
            Value::String(s) => {
                if let Some(n) = s
                    .strip_prefix("$(params.")
                    .and_then(|x| x.strip_suffix("[*])"))
                {
                    pipeline_params[n].clone()
                } else {
                    P::S(subst(s, pipeline_params, &vars))
                }
            }
            other => P::of(other),
        };
        base.insert(name, v);
    }
    let mut out = vec![base];
    for m in pipeline_task["matrix"]["params"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = m["name"].as_str().unwrap();
        let values = match &m["value"] {
            Value::String(s) => {
                let n = s
                    .strip_prefix("$(params.")
                    .and_then(|x| x.strip_suffix("[*])"))
                    .expect("a matrix param's value is an array");
                match &pipeline_params[n] {
                    P::A(a) => a.clone(),
                    P::S(_) => panic!("matrix param {name}: {n} is not an array"),
                }
            }
            other => match P::of(other) {
                P::A(a) => a,
                P::S(_) => panic!("matrix param {name} is not an array"),
            },
        };
        out = out
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(name.to_string(), P::S(v.clone()));
                    c
                })
            })
            .collect();
    }
    out
}

/// A step as it would run: env (stepTemplate's, then the step's), args,
/// script, and whether it is privileged; `None` when its `when` is false.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub image: String,
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
    pub script: String,
    pub privileged: bool,
}

/// The steps of `task` that run with `params` (complete: [`task_params`]),
/// the workspaces bound to paths (`None`: an optional one left unbound),
/// and the results written under `results`.
pub fn steps(
    task: &Value,
    params: &Params,
    workspaces: &BTreeMap<String, Option<PathBuf>>,
    results: &Path,
) -> Vec<Step> {
    let mut vars = BTreeMap::new();
    for w in task["spec"]["workspaces"].as_array().into_iter().flatten() {
        let name = w["name"].as_str().unwrap();
        let bound = workspaces.get(name).cloned().flatten();
        assert!(
            bound.is_some() || w["optional"] == true,
            "workspace {name} is not optional and not bound"
        );
        vars.insert(
            format!("workspaces.{name}.bound"),
            bound.is_some().to_string(),
        );
        vars.insert(
            format!("workspaces.{name}.path"),
            bound.map(|p| p.display().to_string()).unwrap_or_default(),
        );
    }
    for r in task["spec"]["results"].as_array().into_iter().flatten() {
        let name = r["name"].as_str().unwrap();
        vars.insert(
            format!("results.{name}.path"),
            results.join(name).display().to_string(),
        );
    }
    let tmpl = &task["spec"]["stepTemplate"];
    let env_of = |v: &Value| -> Vec<(String, String)> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    subst(e["value"].as_str().unwrap_or(""), params, &vars),
                )
            })
            .collect()
    };
    let mut out = Vec::new();
    for s in task["spec"]["steps"].as_array().unwrap() {
        let runs = s["when"].as_array().into_iter().flatten().all(|w| {
            let input = subst(w["input"].as_str().unwrap_or(""), params, &vars);
            let values: Vec<String> = args(&w["values"], params, &vars);
            let inside = values.contains(&input);
            match w["operator"].as_str() {
                Some("in") => inside,
                Some("notin") => !inside,
                other => panic!("when operator {other:?}"),
            }
        });
        if !runs {
            continue;
        }
        let mut env = env_of(&tmpl["env"]);
        for (k, v) in env_of(&s["env"]) {
            env.retain(|e| e.0 != k);
            env.push((k, v));
        }
        let image = s["image"].as_str().or(tmpl["image"].as_str()).unwrap();
        out.push(Step {
            name: s["name"].as_str().unwrap().to_string(),
            image: subst(image, params, &vars),
            env,
            args: args(&s["args"], params, &vars),
            script: s["script"].as_str().unwrap_or("").to_string(),
            privileged: s["securityContext"]["privileged"] == true
                || tmpl["securityContext"]["privileged"] == true,
        });
    }
    out
}

/// The deploy/ file's documents of `kind` named `name`.
pub fn doc(file: &str, kind: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    load(&p)
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("{file} has no {kind}"))
}

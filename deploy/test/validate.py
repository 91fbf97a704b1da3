#!/usr/bin/env python3
"""Check Kubernetes documents against a CRD's structural schema, offline.

    validate.py [--strict] CRD.yaml[.gz]... -- DOC.yaml...

Each document whose (apiVersion, kind) a CRD serves is checked against that
version's openAPIV3Schema, read the way the API server reads it; a document
no CRD serves is an error (this checks CRD kinds only: kubernetes-validate
checks the built-in ones). One line per document: `OK path kind/name` or
`ERROR path kind/name: field: message`; exit 1 if any failed.

The structural-schema dialect in JSON Schema terms:
  nullable: true                        type may also be null
  x-kubernetes-preserve-unknown-fields  any field below is kept
  --strict                              an object that lists properties and
                                        does not preserve unknown fields
                                        refuses others (the API server's
                                        fieldValidation=Strict; without it
                                        they are pruned in silence)
  x-kubernetes-list-type: map           entries unique by the list-map-keys
  x-kubernetes-validations (CEL)        not evaluated
metadata is checked to be an object, as for any custom resource.
"""
import gzip
import sys

import jsonschema
import yaml


def to_json_schema(node, strict):
    if isinstance(node, list):
        return [to_json_schema(n, strict) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("properties", "patternProperties"):
            out[k] = {name: to_json_schema(s, strict) for name, s in v.items()}
        elif k in ("items", "additionalProperties", "not") and isinstance(v, dict):
            out[k] = to_json_schema(v, strict)
        elif k in ("anyOf", "oneOf", "allOf"):
            out[k] = [to_json_schema(s, strict) for s in v]
        elif k == "nullable" or k.startswith("x-kubernetes-"):
            continue
        else:
            out[k] = v
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    elif strict and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def list_map_errors(schema, doc, at):
    errs = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in schema.get("properties", {}):
                errs += list_map_errors(schema["properties"][k], v, f"{at}.{k}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            seen = set()
            for e in doc:
                if isinstance(e, dict):
                    key = tuple(e.get(k) for k in keys)
                    if key in seen:
                        errs.append(f"{at}: two entries with {dict(zip(keys, key))}")
                    seen.add(key)
        for i, e in enumerate(doc):
            errs += list_map_errors(schema["items"], e, f"{at}[{i}]")
    return errs


def read_yaml(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def main(argv):
    strict = "--strict" in argv
    argv = [a for a in argv if a != "--strict"]
    if "--" not in argv:
        sys.exit(__doc__)
    sep = argv.index("--")
    served = {}
    for path in argv[:sep]:
        for crd in read_yaml(path):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                raw = v["schema"]["openAPIV3Schema"]
                s = to_json_schema(raw, strict)
                props = s.setdefault("properties", {})
                props["metadata"] = {"type": "object"}
                props.setdefault("apiVersion", {"type": "string"})
                props.setdefault("kind", {"type": "string"})
                served[(f"{group}/{v['name']}", kind)] = (s, raw)
    failed = False
    for path in argv[sep + 1:]:
        for doc in read_yaml(path):
            key = (doc.get("apiVersion"), doc.get("kind"))
            what = f"{path} {key[1]}/{(doc.get('metadata') or {}).get('name')}"
            if key not in served:
                print(f"ERROR {what}: no CRD given serves {key[0]} {key[1]}")
                failed = True
                continue
            schema, raw = served[key]
            errs = [f"{'.'.join(map(str, e.absolute_path)) or '(document)'}: {e.message}"
                    for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
            errs += list_map_errors(raw, doc, "")
            for e in errs:
                print(f"ERROR {what}: {e}")
            if errs:
                failed = True
            else:
                print(f"OK {what} ({key[0]})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

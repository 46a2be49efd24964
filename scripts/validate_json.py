#!/usr/bin/env python3
"""Validates JSON files against a JSON Schema (draft 2020-12), strictly.

    python3 scripts/validate_json.py SCHEMA FILE... [--at /json/pointer]

--at validates the value at that JSON pointer of each file (e.g. /meta/onnx, the import
summary inside a model.json). Every error is printed with the path of the value; the exit
status is 1 when a file breaks the schema, 2 when a file or the schema cannot be read.
"""
import argparse
import json
import sys

from jsonschema import Draft202012Validator


def at_pointer(doc, pointer):
    for part in [p for p in pointer.split("/")[1:]]:
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schema")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--at", default="", help="a JSON pointer into each file")
    args = ap.parse_args()
    try:
        with open(args.schema) as f:
            schema = json.load(f)
        Draft202012Validator.check_schema(schema)
    except (OSError, ValueError) as e:
        print(f"{args.schema}: cannot use the schema: {e}", file=sys.stderr)
        return 2
    validator = Draft202012Validator(schema)
    status = 0
    for path in args.files:
        try:
            with open(path) as f:
                doc = at_pointer(json.load(f), args.at) if args.at else json.load(f)
        except (OSError, ValueError, KeyError, IndexError) as e:
            print(f"{path}: cannot read {args.at or 'the file'}: {e}", file=sys.stderr)
            return 2
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errors:
            where = "/" + "/".join(str(p) for p in e.absolute_path)
            print(f"{path}{args.at}: {where}: {e.message}")
        if errors:
            status = 1
        else:
            print(f"{path}{args.at}: valid against {schema.get('$id', args.schema)}")
    return status


if __name__ == "__main__":
    sys.exit(main())

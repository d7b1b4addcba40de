#!/usr/bin/env python3
"""Builds the submission a grader fixture describes (grader/acceptance/<name>/expected.json).

    compose_fixture.py FIXTURE_DIR REPO_ROOT OUT_BASE

prints two lines: the submission's path (a directory or an archive made from OUT_BASE) and
the chapter ids to grade (comma-separated, may be empty = all).

A fixture's "input" (every key optional):
  kind     "dir" (default), "tar.gz", "zip", "empty_dir", "missing", "hostile_tar"
  layout   "chapters" (<slug>/<file>, default) or "workbook" (chapters/<slug>/<file>)
  wrap     a directory name everything is put under (as a student's zip often has)
  base     "solutions" or "starters": the editable files of `chapters` to start from
  chapters chapter ids the submission covers (and the grader grades)
  files    {"<slug>/<file>": "<file in the fixture>" or "@<file in the repository>"}
  edits    [{"file": "<slug>/<file>", "replace": "text", "with": "text"}]: on the base file;
           a replace text that is not there is an error (the fixture no longer applies)
  extra    {"<path in the submission>": "<file in the fixture>"}: anything else
  pad_kb   {"<slug>/<file>": kilobytes}: grow a file with a comment to that size
  members  for hostile_tar: [{"name": ..., "text": ... | "from": ..., "type": "file"|"symlink", "target": ...}]
"""
import io
import json
import os
import shutil
import sys
import tarfile
import zipfile


def slugs(repo):
    out = {}
    tests = os.path.join(repo, "tests")
    for d in sorted(os.listdir(tests)):
        manifest = os.path.join(tests, d, "chapter.json")
        if os.path.isfile(manifest):
            with open(manifest) as f:
                m = json.load(f)
            out[m["id"]] = m
    return out


def fail(msg):
    sys.stderr.write("compose_fixture: " + msg + "\n")
    sys.exit(2)


def main():
    if len(sys.argv) != 4:
        fail(__doc__)
    fixture, repo, out_base = sys.argv[1:]
    with open(os.path.join(fixture, "expected.json")) as f:
        spec = json.load(f)
    inp = spec.get("input", {})
    kind = inp.get("kind", "dir")
    chapters = slugs(repo)
    ids = inp.get("chapters", [])
    for i in ids:
        if i not in chapters:
            fail(f"{fixture}: chapter {i} does not exist")

    if os.path.exists(out_base):
        shutil.rmtree(out_base) if os.path.isdir(out_base) else os.remove(out_base)
    if kind == "missing":
        print(out_base + "-does-not-exist")
        print(",".join(ids))
        return
    if kind == "hostile_tar":
        path = out_base + ".tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for m in inp["members"]:
                info = tarfile.TarInfo(m["name"])
                if m.get("type") == "symlink":
                    info.type = tarfile.SYMTYPE
                    info.linkname = m["target"]
                    tar.addfile(info)
                    continue
                data = m["text"].encode() if "text" in m else open(os.path.join(fixture, m["from"]), "rb").read()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        print(path)
        print(",".join(ids))
        return

    root = out_base
    os.makedirs(root)
    if kind == "empty_dir":
        print(root)
        print(",".join(ids))
        return
    top = os.path.join(root, inp["wrap"]) if inp.get("wrap") else root
    prefix = os.path.join(top, "chapters") if inp.get("layout", "chapters") == "workbook" else top

    base = inp.get("base")
    for i in ids or sorted(chapters):
        slug = chapters[i]["slug"]
        if base is None:
            continue
        src_dir = os.path.join(repo, "solutions" if base == "solutions" else "chapters", slug)
        for f in chapters[i]["editable"]:
            dst = os.path.join(prefix, slug, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(src_dir, f), dst)
    for rel, src in inp.get("files", {}).items():
        dst = os.path.join(prefix, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(repo, src[1:]) if src.startswith("@") else os.path.join(fixture, src), dst)
    for e in inp.get("edits", []):
        path = os.path.join(prefix, e["file"])
        with open(path) as f:
            text = f.read()
        if e["replace"] not in text:
            fail(f"{fixture}: '{e['replace']}' is not in {e['file']} any more: update the fixture")
        with open(path, "w") as f:
            f.write(text.replace(e["replace"], e["with"]))
    for rel, src in inp.get("extra", {}).items():
        dst = os.path.join(top, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(fixture, src), dst)
    for rel, kb in inp.get("pad_kb", {}).items():
        path = os.path.join(prefix, rel)
        with open(path, "a") as f:
            line = "// " + "x" * 125 + "\n"
            f.write(line * (kb * 1024 // len(line) + 1))

    if kind == "dir":
        print(root)
    elif kind in ("tar.gz", "zip"):
        fmt = "gztar" if kind == "tar.gz" else "zip"
        archive = shutil.make_archive(out_base + "-archive", fmt, root)
        shutil.rmtree(root)
        print(archive)
    else:
        fail(f"{fixture}: unknown input kind '{kind}'")
    print(",".join(ids))


if __name__ == "__main__":
    main()

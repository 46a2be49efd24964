"""Checks of an HTML report as a browser rendered it (tests/cli_html.sh), stdlib only.

  python3 html_page_check.py dom DOM.html AUDIT.json   # the DOM headless chromium dumped
  python3 html_page_check.py png SHOT.png MIN_COLOURS  # the screenshot is not blank

`dom`: the verdict table has one row per LayerNorm of the audit report, in its order,
with its verdicts; each row links to an element of the drawn graph, and that element is
filled with the row's verdict colour. `png`: the screenshot decodes, has at least
MIN_COLOURS distinct colours and more than 2 % non-white pixels.
"""
import json
import re
import struct
import sys
import zlib

FILL = {"fold": "#c8e6c9", "inference": "#ffe0b2", "training": "#ffe0b2", "keep": "#ffcdd2"}


def fail(msg):
    print("html_page_check: " + msg)
    sys.exit(1)


def check_dom(dom_path, audit_path):
    dom = open(dom_path, encoding="utf-8").read()
    audit = json.load(open(audit_path, encoding="utf-8"))
    lns = audit["layer_norms"]
    table = re.search(r'<table id="verdicts">(.*?)</table>', dom, re.S)
    if not table:
        fail("no verdict table in the DOM")
    rows = re.findall(r'<tr class="ln (\w+)">(.*?)</tr>', table.group(1), re.S)
    if len(rows) != len(lns):
        fail(f"{len(rows)} table rows, the audit has {len(lns)} LayerNorms")
    for (cls, row), ln in zip(rows, lns):
        f = ln["foldable"]
        want = "fold" if f["inference"] and f["training"] else \
            "inference" if f["inference"] else "training" if f["training"] else "keep"
        if cls != want:
            fail(f"row of {ln['name']}: class {cls}, the audit says {want}")
        cells = re.findall(r'<td class="(yes|no)">', row)
        if cells != ["yes" if f["inference"] else "no", "yes" if f["training"] else "no"]:
            fail(f"row of {ln['name']}: verdict cells {cells}")
        link = re.search(r'<a href="#([nb]\d+)"><code>([^<]*)</code>', row)
        if not link:
            fail(f"row of {ln['name']}: no link into the graph")
        anchor, name = link.groups()
        if name.replace("&amp;", "&") != ln["node"]:
            fail(f"row link names {name}, expected {ln['node']}")
        group = re.search(r'<g id="' + anchor + r'" class="node">(.*?)</g>', dom, re.S)
        if not group:
            fail(f"row of {ln['name']}: the graph has no element #{anchor}")
        if anchor.startswith("n") and f'fill="{FILL[want]}"' not in group.group(1):
            fail(f"graph node #{anchor} of {ln['name']} is not filled {FILL[want]}")
        if anchor.startswith("b") and FILL[want] not in group.group(1):
            fail(f"graph block #{anchor} does not show {ln['name']} in {FILL[want]}")
    print(f"html_page_check: {len(rows)} rows match the audit and the graph")


def png_pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("not a PNG")
    pos, idat, head = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour, _, _, interlace = head
    if depth != 8 or colour not in (2, 6) or interlace:
        fail(f"unsupported PNG layout (depth {depth}, colour type {colour})")
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    prev, rows, k = bytearray(stride), [], 0
    for _ in range(h):
        f, line = raw[k], bytearray(raw[k + 1:k + 1 + stride])
        k += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def check_png(path, min_colours):
    w, h, bpp, rows = png_pixels(path)
    colours, ink = set(), 0
    for line in rows:
        for x in range(0, w * bpp, bpp):
            px = line[x:x + 3]
            colours.add(px)
            ink += px != b"\xff\xff\xff"
    share = ink / (w * h)
    if len(colours) < min_colours or share <= 0.02:
        fail(f"screenshot looks blank: {len(colours)} colours, {share:.1%} non-white")
    print(f"html_page_check: {w}x{h} screenshot, {len(colours)} colours, {share:.1%} non-white")


if __name__ == "__main__":
    if sys.argv[1] == "dom":
        check_dom(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "png":
        check_png(sys.argv[2], int(sys.argv[3]))
    else:
        fail("usage: dom DOM AUDIT | png SHOT MIN_COLOURS")

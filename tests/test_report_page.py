"""reports/index.html: built from the reports in a folder, and opened in a real headless browser
(Debian's chromium; scripts/test.sh installs it) to check that its tables and images render."""
import html
import html.parser
import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

import dualops
from dualops import cli, report_page, report_runs


def _png(path: Path, w=40, h=20):
    """A small valid PNG (when matplotlib is absent the page still has an image to show)."""
    raw = b"".join(b"\x00" + bytes([200, 60, 60] * w) for _ in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """Two parity runs (the second, smaller one is the newest; the first must stay listed) and a
    bench run with measurements (reference) and cost-model estimates (ascend_sim, when built)."""
    d = tmp_path_factory.mktemp("reports")
    assert cli.main(["parity", "--op", "grouped_gemm", "--case", "contig_bf16_g4_empty", "--case",
                     "masked_bf16_g3", "--backend", "reference", "--seed", "2", "--out", str(d)]) == 0
    assert cli.main(["parity", "--op", "grouped_gemm", "--case", "masked_bf16_g3", "--backend", "reference",
                     "--seed", "3", "--out", str(d)]) == 0
    backends = "reference,ascend_sim" if dualops.backends()["ascend_sim"]["available"] else "reference"
    assert cli.main(["bench", "--sweep", "quick-gg", "--backend", backends, "--runs", "3", "--budget",
                     "0.01", "--out", str(d)]) == 0
    if not (d / "bench_quick-gg.png").exists():
        _png(d / "bench_quick-gg.png")
    # One timing made noisy on purpose (a quiet run may have none): the page must flag it.
    bench = json.loads((d / "bench.json").read_text())
    row = next(r for r in bench["rows"] if r["status"] == "ok" and r["kind"] == "measured")
    row["spread"] = 1.5
    (d / "bench.json").write_text(json.dumps(bench))
    report_page.write(d)
    return d


class _Scan(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.imgs, self.links, self.text = {}, [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src"))
        if tag == "a":
            self.links.append(a.get("href"))

    def handle_data(self, data):
        self.text.append(data)


def _text(page: str) -> tuple[str, "_Scan"]:
    scan = _Scan()
    scan.feed(page)
    return " ".join(scan.text), scan


def test_page_has_every_section(report_dir):
    page = (report_dir / "index.html").read_text()
    text, scan = _text(page)
    for words in ("Runs", "Machine and devices", "Backends", "Parity", "grouped_gemm", "PASS 1/1", "Benchmarks",
                  "quick-gg", "vs torch._grouped_mm", "spread", "NOISY", "measured: CPU", "Peers",
                  "flashinfer-segment_gemm", "flag_gems-grouped_mm", "torch_npu-grouped_matmul",
                  "runs on an NVIDIA GPU", "Reproduce", "python3 -m dualops parity", "--seed 3",
                  "python3 -m dualops bench --sweep quick-gg --backend reference"):
        assert words in text, words
    if dualops.backends()["ascend_sim"]["available"]:
        assert "estimate (ascend910b2 cost model)" in text
    assert scan.tags["table"] >= 6
    assert scan.imgs == ["bench_quick-gg.png"]
    for href in scan.links:
        assert href.startswith("#") or (report_dir / href).is_file(), href
    assert "<script" not in page and "src=\"http" not in page and "href=\"http" not in page  # static


def test_every_run_is_kept_and_listed(report_dir):
    runs = report_runs.list_runs(report_dir)
    assert [r["kind"] for r in runs] == ["bench", "parity", "parity"]
    first = runs[-1]
    assert "--seed 2" in first["command"] and first["result"].startswith("2 pass, 0 fail")
    assert runs[1]["result"].startswith("1 pass, 0 fail") and first["host"] and first["machine"]
    kept = json.loads((report_dir / "runs" / first["dir"] / "parity.json").read_text())
    assert kept["summary"]["pass"] == 2 and kept["seed"] == 2      # the older run is not lost
    assert json.loads((report_dir / "parity.json").read_text())["seed"] == 3   # the newest is on top
    text, scan = _text((report_dir / "index.html").read_text())
    for r in runs:
        assert f"runs/{r['dir']}/index.html" in scan.links and r["dir"] in text
    assert text.count("(shown below)") == 2
    own, _ = _text((report_dir / "runs" / first["dir"] / "index.html").read_text())
    assert "PASS 2/2" in own and "Every run" in own and "No bench report here" in own
    mode = 0o666 & ~_umask()   # 0644 under the usual umask: as readable as any file the user writes
    for p in [report_dir / "index.html", report_dir / "bench.json"] + list((report_dir / "runs").rglob("*")):
        if p.is_file() and not p.name.endswith(".png"):
            assert p.stat().st_mode & 0o777 == mode, p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_noisy_rows_are_flagged(report_dir):
    page = (report_dir / "index.html").read_text()
    assert 'id="noisy-warning"' in page and "150% NOISY" in page and 'class="noisy"' in page


def test_page_without_reports_says_so(tmp_path):
    page = report_page.render(tmp_path)
    assert "No parity report here" in page and "No bench report here" in page


def test_page_survives_damaged_reports(tmp_path):
    (tmp_path / "parity.json").write_text("[1,")
    (tmp_path / "bench.json").write_text(json.dumps([]))
    page = report_page.render(tmp_path)
    assert "No parity report here" in page and "No bench report here" in page


_CHECK = """
<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const tables = [...document.querySelectorAll('table')];
  const shown = e => e && e.getBoundingClientRect().height > 0 && getComputedStyle(e).visibility !== 'hidden';
  const r = {
    images: imgs.length,
    images_ok: imgs.filter(i => i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0).length,
    tables: tables.length,
    tables_shown: tables.filter(t => t.getBoundingClientRect().height > 0 && t.rows.length > 0).length,
    cells: document.querySelectorAll('td').length,
    h2: [...document.querySelectorAll('h2')].map(h => h.textContent),
    runs_rows: document.querySelector('#runs + p + table').rows.length - 1,
    noisy_cells: [...document.querySelectorAll('td.noisy')].filter(shown).length,
    noisy_bg: getComputedStyle(document.querySelector('td.noisy')).backgroundColor,
    warning_shown: shown(document.querySelector('#noisy-warning')),
    peer_tables: [...document.querySelectorAll('#peers ~ table')].filter(t => t.getBoundingClientRect().height > 0)
      .map(t => t.rows.length - 1),
    sources: [...new Set([...document.querySelectorAll('#bench ~ table td:nth-child(3)')].map(td => td.textContent)
      .filter(t => t))],
  };
  const pre = document.createElement('pre');
  pre.id = 'browser-check';
  pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
});
</script>
"""


def _browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _open(browser, page: Path) -> dict:
    """What the headless browser laid out for ``page`` (with the check script beside it, so the
    relative image paths resolve as they do for the page itself)."""
    probe = page.parent / "_browser_check.html"
    probe.write_text(page.read_text().replace("</body>", _CHECK + "</body>"))
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--allow-file-access-from-files", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
    dom = done.stdout
    assert 'id="browser-check"' in dom, done.stderr[-2000:]
    start = dom.index('id="browser-check">') + len('id="browser-check">')
    return json.loads(html.unescape(dom[start:dom.index("</pre>", start)]))


def test_page_renders_in_a_headless_browser(report_dir):
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium here (apt-get install chromium; scripts/test.sh installs it for CI)")
    result = _open(browser, report_dir / "index.html")
    assert result["images"] == 1 and result["images_ok"] == 1, result
    assert result["tables"] >= 6 and result["tables_shown"] == result["tables"], result
    assert result["cells"] > 20
    assert result["h2"] == ["Runs", "Machine and devices", "Parity", "Benchmarks", "Peers", "Reproduce"]
    assert result["runs_rows"] == 3, result
    assert result["noisy_cells"] >= 1 and result["warning_shown"] and result["noisy_bg"] != "rgba(0, 0, 0, 0)", result
    assert result["peer_tables"] == [len(_peer_names("grouped_gemm"))], result
    assert "measured: CPU" in result["sources"], result
    if dualops.backends()["ascend_sim"]["available"]:
        assert any(s.startswith("estimate (") for s in result["sources"]), result


def _peer_names(op):
    from dualops.bench import peers

    return peers.names(op)

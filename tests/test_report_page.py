"""reports/index.html: built from the reports in a folder, and opened in a real headless browser
(Debian's chromium; scripts/test.sh installs it) to check that its tables and images render."""
import html
import html.parser
import json
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from dualops import cli, report_page


def _png(path: Path, w=40, h=20):
    """A small valid PNG (when matplotlib is absent the page still has an image to show)."""
    raw = b"".join(b"\x00" + bytes([200, 60, 60] * w) for _ in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("reports")
    assert cli.main(["parity", "--op", "grouped_gemm", "--case", "contig_bf16_g4_empty", "--case",
                     "masked_bf16_g3", "--backend", "reference", "--seed", "2", "--out", str(d)]) == 0
    assert cli.main(["bench", "--sweep", "quick-gg", "--backend", "reference", "--runs", "3", "--budget",
                     "0.01", "--out", str(d)]) == 0
    if not (d / "bench_quick-gg.png").exists():
        _png(d / "bench_quick-gg.png")
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


def test_page_has_every_section(report_dir):
    page = (report_dir / "index.html").read_text()
    scan = _Scan()
    scan.feed(page)
    text = " ".join(scan.text)
    for words in ("Machine and devices", "Backends", "Parity", "grouped_gemm", "PASS 2/2", "Benchmarks",
                  "quick-gg", "vs torch._grouped_mm", "Reproduce", "python3 -m dualops parity",
                  "--seed 2", "python3 -m dualops bench --sweep quick-gg --backend reference"):
        assert words in text, words
    assert scan.tags["table"] >= 4
    assert scan.imgs == ["bench_quick-gg.png"]
    for href in scan.links:
        assert href.startswith("#") or (report_dir / href).is_file(), href
    assert "<script" not in page and "src=\"http" not in page and "href=\"http" not in page  # static


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
  const r = {
    images: imgs.length,
    images_ok: imgs.filter(i => i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0).length,
    tables: tables.length,
    tables_shown: tables.filter(t => t.getBoundingClientRect().height > 0 && t.rows.length > 0).length,
    cells: document.querySelectorAll('td').length,
    h2: [...document.querySelectorAll('h2')].map(h => h.textContent),
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


def test_page_renders_in_a_headless_browser(report_dir):
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium here (apt-get install chromium; scripts/test.sh installs it for CI)")
    # The page as it is, plus a check script reading what the browser laid out, beside it so the
    # relative image paths resolve as they do for the page itself.
    probe = report_dir / "_browser_check.html"
    probe.write_text((report_dir / "index.html").read_text().replace("</body>", _CHECK + "</body>"))
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--allow-file-access-from-files", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
    dom = done.stdout
    assert 'id="browser-check"' in dom, done.stderr[-2000:]
    start = dom.index('id="browser-check">') + len('id="browser-check">')
    result = json.loads(html.unescape(dom[start:dom.index("</pre>", start)]))
    assert result["images"] == 1 and result["images_ok"] == 1, result
    assert result["tables"] >= 4 and result["tables_shown"] == result["tables"], result
    assert result["cells"] > 20
    assert result["h2"] == ["Machine and devices", "Parity", "Benchmarks", "Reproduce"]

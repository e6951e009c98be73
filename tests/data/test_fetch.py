"""Downloads against a local HTTP server (127.0.0.1, Range support): resume, verify, skip."""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from driftmatrix.data import fetch as fetch_mod
from driftmatrix.data.fetch import FetchError, download, fetch

PAYLOAD = bytes(range(256)) * 4000  # ~1 MB


class Handler(BaseHTTPRequestHandler):
    truncate_next = False
    ranges: list = []

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        if self.path.startswith("/missing"):
            self.send_error(404)
            return
        if self.path.startswith("/to-ftp"):  # a server that tries to move the download off http(s)
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1/x.jsonl.gz")
            self.end_headers()
            return
        start = 0
        rng = self.headers.get("Range")
        type(self).ranges.append(rng)
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(PAYLOAD):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        else:
            self.send_response(200)
        body = PAYLOAD[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if type(self).truncate_next:  # announce everything, send a third, drop the connection
            type(self).truncate_next = False
            self.wfile.write(body[: len(body) // 3])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture
def server():
    Handler.ranges = []
    Handler.truncate_next = False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_resume_after_truncated_download(server, tmp_path):
    dest = tmp_path / "data" / "Cat.jsonl.gz"
    Handler.truncate_next = True
    with pytest.raises(FetchError, match="rerun"):
        download(f"{server}/Cat.jsonl.gz", dest, progress=False, timeout=5)
    part = dest.with_name("Cat.jsonl.gz.part")
    assert part.exists() and 0 < part.stat().st_size < len(PAYLOAD) and not dest.exists()
    done = part.stat().st_size
    download(f"{server}/Cat.jsonl.gz", dest, sha256=hashlib.sha256(PAYLOAD).hexdigest(), progress=False)
    assert dest.read_bytes() == PAYLOAD and not part.exists()
    assert Handler.ranges == [None, f"bytes={done}-"]


def test_checksum_mismatch_removes_download(server, tmp_path):
    dest = tmp_path / "f.bin"
    with pytest.raises(FetchError, match="sha256 .* does not match the expected 00ff"):
        download(f"{server}/f.bin", dest, sha256="00ff", progress=False)
    assert not dest.exists() and not (tmp_path / "f.bin.part").exists()
    with pytest.raises(FetchError, match="size 1024000 bytes, expected 5"):
        download(f"{server}/f.bin", dest, size=5, progress=False)


def test_complete_part_and_http_error(server, tmp_path):
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.part").write_bytes(PAYLOAD)  # complete .part: server answers 416
    download(f"{server}/f.bin", dest, size=len(PAYLOAD), progress=False)
    assert dest.read_bytes() == PAYLOAD
    with pytest.raises(FetchError, match="HTTP 404"):
        download(f"{server}/missing", tmp_path / "m.bin", progress=False)


def test_fetch_records_manifest_and_skips_verified(server, tmp_path):
    lines = []
    paths = fetch("amazon", tmp_path / "amazon", url=f"{server}/All_Beauty.jsonl.gz", progress=False,
                  echo=lines.append)
    assert paths == [tmp_path / "amazon" / "All_Beauty.jsonl.gz"]
    manifest = json.loads((tmp_path / "amazon" / "fetch.json").read_text())
    assert manifest["All_Beauty.jsonl.gz"]["sha256"] == hashlib.sha256(PAYLOAD).hexdigest()
    fetch("amazon", tmp_path / "amazon", url=f"{server}/All_Beauty.jsonl.gz", progress=False, echo=lines.append)
    assert lines[-1].endswith("present and verified, skipped") and len(Handler.ranges) == 1


def test_source_table_and_manual_steps(tmp_path):
    urls = [r.url for r in fetch_mod.SOURCES["amazon"].files]
    assert urls[0] == ("https://mcauleylab.ucsd.edu/public_datasets/data/amazon_2023/raw/review_categories/"
                       "All_Beauty.jsonl.gz") and len(urls) == 7
    lines = []
    assert fetch("arxiv", tmp_path / "arxiv", echo=lines.append) == []
    assert "kaggle datasets download -d Cornell-University/arxiv" in "\n".join(lines)
    with pytest.raises(FetchError, match="unknown dataset"):
        fetch("imagenet")


# --- security: URL schemes, file names, archive members ------------------------------------------
@pytest.mark.parametrize("url", ["ftp://example.org/x.jsonl.gz", "gopher://h/x", "data:text/plain,hi",
                                 "javascript:alert(1)", "/etc/passwd", "x.jsonl.gz"])
def test_only_http_https_and_file_urls(tmp_path, url):
    with pytest.raises(FetchError, match="only http://, https:// and file:// URLs"):
        fetch("amazon", tmp_path / "amazon", url=url, progress=False, echo=lambda _: None)
    with pytest.raises(FetchError, match="only http://, https:// and file:// URLs"):
        download(url, tmp_path / "x.bin", progress=False)
    assert not any(tmp_path.rglob("*.part"))


def test_redirect_to_ftp_is_refused(server, tmp_path):
    with pytest.raises(FetchError, match="refused redirect to 'ftp://"):
        download(f"{server}/to-ftp", tmp_path / "x.bin", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_file_url_is_fetched_and_recorded(tmp_path):
    src = tmp_path / "src" / "Local_Cat.jsonl.gz"
    src.parent.mkdir()
    src.write_bytes(PAYLOAD)
    paths = fetch("amazon", tmp_path / "amazon", url=src.as_uri(), progress=False, echo=lambda _: None)
    assert paths == [tmp_path / "amazon" / "Local_Cat.jsonl.gz"] and paths[0].read_bytes() == PAYLOAD


@pytest.mark.parametrize("category", ["../../x", "/etc/cron.d/x", "a/b", "..", ".hidden", "", "x\0y"])
def test_traversing_category_is_refused(tmp_path, category):
    with pytest.raises(FetchError, match="category .* is not a plain name"):
        fetch("amazon", tmp_path / "data" / "amazon", categories=[category], progress=False, echo=lambda _: None)
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.parametrize("tail, name", [
    ("..", "yearbook"), ("%2e%2e", "yearbook"), ("..%2F..%2Fescape.txt", "escape.txt"),
    ("a%2F..%2F..%2Fx.tar.gz", "x.tar.gz"), ("we%20ird%3Fname.zip?dl=1", "we_ird_name.zip"), ("", "yearbook"),
    ("...", "yearbook"), (".bashrc", "bashrc"),
])
def test_url_tail_becomes_a_sanitised_basename(server, tmp_path, tail, name):
    dest = tmp_path / "data" / "yearbook"
    paths = fetch("yearbook", dest, url=f"{server}/dir/{tail}", progress=False, echo=lambda _: None)
    assert paths == [dest / name] and paths[0].read_bytes() == PAYLOAD
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted([
        f"data/yearbook/{name}", "data/yearbook/fetch.json"])


def test_safe_name_unit():
    assert fetch_mod.safe_name("../../etc/passwd") == "passwd"
    assert fetch_mod.safe_name("All_Beauty.jsonl.gz") == "All_Beauty.jsonl.gz"
    assert fetch_mod.safe_name("..", default="d") == "d"
    assert fetch_mod.safe_name("x" * 400).startswith("x") and len(fetch_mod.safe_name("x" * 400)) <= 200

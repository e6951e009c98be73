"""Download real datasets into ``data/<dataset>/``: resumable, verified (sha256 or size) and
recorded in ``fetch.json``; datasets behind a login print the manual steps. Only ``http(s)`` and
``file`` URLs are fetched and every file name is a sanitised basename (:func:`safe_name`), so no
input can name a path outside the dataset folder."""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from driftmatrix.data.table import DataError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
AMAZON_URL = ("https://mcauleylab.ucsd.edu/public_datasets/data/amazon_2023/raw/review_categories/"
              "{category}.jsonl.gz")
AMAZON_PAPER_CATEGORIES = ("All_Beauty", "Amazon_Fashion", "Appliances", "Arts_Crafts_and_Sewing",
                           "Automotive", "Baby_Products", "Beauty_and_Personal_Care")
YEARBOOK_FILE = "faces_aligned_small_mirrored_co_aligned_cropped_cleaned.tar.gz"
YEARBOOK_URL = f"https://www.dropbox.com/s/ubjjoo0b2wz4vgz/{YEARBOOK_FILE}?dl=1"
ARXIV_FILE = "arxiv-metadata-oai-snapshot.json"


SCHEMES = ("http", "https", "file")
MAX_NAME = 200
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_CATEGORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class FetchError(DataError):
    """A download failed or did not verify; the message says what to do next."""


def check_url(url: str) -> str:
    """``url`` if its scheme is http, https or file, else FetchError."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        raise FetchError(f"{url[:100]!r}: only http://, https:// and file:// URLs are fetched "
                         f"(scheme {scheme or 'none'!r})")
    return url


def safe_name(name: str, default: str = "download") -> str:
    """A file name that stays inside its folder: the last path part, sanitised, at most 200 characters."""
    base = _UNSAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".")[:MAX_NAME]
    return base or default


def url_basename(url: str, default: str) -> str:
    """The sanitised last part of a URL's (percent-decoded) path; ``default`` when it has none."""
    return safe_name(urllib.parse.unquote(urllib.parse.urlsplit(url).path), default)


def check_category(category: str) -> str:
    if not _CATEGORY.fullmatch(category) or ".." in category or len(category) > MAX_NAME:
        raise FetchError(f"category {category!r} is not a plain name (letters, digits, '_', '-', '.'; "
                         "e.g. All_Beauty)")
    return category


@dataclass(frozen=True)
class Remote:
    file: str
    url: str
    sha256: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class Source:
    dataset: str
    homepage: str
    licence: str
    files: tuple[Remote, ...] = ()
    manual: str = ""          # steps for a user when there is no direct download
    options: dict = field(default_factory=dict)


def amazon_files(categories: Iterable[str] = AMAZON_PAPER_CATEGORIES) -> tuple[Remote, ...]:
    return tuple(Remote(f"{c}.jsonl.gz", AMAZON_URL.format(category=c)) for c in map(check_category, categories))


SOURCES: dict[str, Source] = {
    "amazon": Source(
        "amazon", "https://amazon-reviews-2023.github.io/",
        "research use; no explicit licence published by McAuley Lab (UCSD), see the homepage",
        amazon_files()),
    "yearbook": Source(
        "yearbook", "https://people.eecs.berkeley.edu/~shiry/projects/yearbooks/yearbooks.html",
        "research use; no explicit licence (Ginosar et al., ICCV 2015 workshops); cite the paper",
        (Remote(YEARBOOK_FILE, YEARBOOK_URL),),
        manual=("If the download link fails, open the project page above, download the aligned\n"
                f"portraits archive ({YEARBOOK_FILE}) and put it in {{dest}}/ unchanged:\n"
                "the yearbook reader reads the .tar.gz directly (dataset.path: {dest}/" + YEARBOOK_FILE + ").")),
    "arxiv": Source(
        "arxiv", "https://www.kaggle.com/datasets/Cornell-University/arxiv",
        "CC0 1.0 (arXiv metadata, Kaggle dataset by Cornell University)",
        manual=("Kaggle needs a login, so this step is manual:\n"
                "  1. pip install kaggle\n"
                "  2. Kaggle > Settings > API > Create New Token, save it as ~/.kaggle/kaggle.json (chmod 600)\n"
                "  3. kaggle datasets download -d Cornell-University/arxiv -p {dest} --unzip\n"
                f"This leaves {{dest}}/{ARXIV_FILE} (about 4.5 GB), the path presets/arxiv.yaml reads.")),
}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to http(s) (urllib's default also follows ftp://)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise FetchError(f"{req.full_url}: refused redirect to {newurl[:100]!r} (only http(s) redirects)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpOnlyRedirects)


def download(url: str, dest: Path, sha256: str | None = None, size: int | None = None,
             progress: bool = True, timeout: float = 60.0) -> Path:
    """Fetch ``url`` to ``dest`` via ``dest.part``, resuming a partial ``.part`` with an HTTP Range."""
    from tqdm import tqdm

    check_url(url)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "driftmatrix-fetch", **({"Range": f"bytes={offset}-"} if offset else {})}
    try:
        resp = _OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing left to send: the .part is already complete
            resp, total = None, offset
        else:
            raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"{url}: cannot connect ({exc}); rerun to retry") from None
    if resp is not None:
        with resp:
            if offset and resp.status != 206:
                log.info("%s: server ignored the range request; restarting from 0", url)
                offset = 0
            length = resp.headers.get("Content-Length")
            total = offset + int(length) if length is not None else None
            got = offset
            with open(part, "ab" if offset else "wb") as out, tqdm(
                    total=total, initial=offset, unit="B", unit_scale=True, desc=dest.name, file=sys.stderr,
                    disable=not progress, leave=False) as bar:
                try:
                    for block in iter(lambda: resp.read(CHUNK), b""):
                        out.write(block)
                        got += len(block)
                        bar.update(len(block))
                except (http.client.IncompleteRead, OSError) as exc:
                    raise FetchError(f"{url}: download interrupted at {got} bytes ({exc.__class__.__name__}); "
                                     f"{part} is kept, rerun the same command to resume") from None
            if total is not None and got < total:
                raise FetchError(f"{url}: got {got} of {total} bytes; {part} is kept, rerun to resume")
    return _verify(part, dest, sha256, size if size is not None else total)


def _verify(part: Path, dest: Path, sha256: str | None, size: int | None) -> Path:
    actual = part.stat().st_size
    if size is not None and actual != size:
        part.unlink()
        raise FetchError(f"{dest.name}: size {actual} bytes, expected {size}; removed {part.name}, "
                         "rerun to fetch again")
    if sha256 is not None:
        digest = sha256_of(part)
        if digest.lower() != sha256.lower():
            part.unlink()
            raise FetchError(f"{dest.name}: sha256 {digest} does not match the expected {sha256}; "
                             f"removed the corrupt download {part.name}")
    part.replace(dest)
    return dest


def fetch(dataset: str, dest: str | Path | None = None, url: str | None = None, sha256: str | None = None,
          categories: Iterable[str] | None = None, progress: bool = True, echo=print) -> list[Path]:
    """Download ``dataset``'s files into ``dest`` (default ``data/<dataset>``); skip verified files."""
    if dataset not in SOURCES:
        raise FetchError(f"unknown dataset {dataset!r}; one of {sorted(SOURCES)}")
    source = SOURCES[dataset]
    dest_dir = Path(dest or Path("data") / dataset)
    if url is not None:
        remotes: tuple[Remote, ...] = (Remote(url_basename(check_url(url), dataset), url, sha256),)
    elif dataset == "amazon" and categories:
        remotes = amazon_files(categories)
    else:
        remotes = tuple(Remote(r.file, r.url, sha256 or r.sha256, r.size) for r in source.files)
    if not remotes:
        echo(f"{dataset}: {source.homepage} (licence: {source.licence})")
        echo(source.manual.format(dest=dest_dir))
        return []
    manifest_path = dest_dir / "fetch.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    done = []
    for remote in remotes:
        target = dest_dir / safe_name(remote.file, dataset)
        if target.resolve().parent != dest_dir.resolve():  # pragma: no cover - safe_name guarantees it
            raise FetchError(f"{remote.file!r}: refusing to write outside {dest_dir}")
        known = manifest.get(remote.file, {})
        if target.exists() and known.get("size") == target.stat().st_size and (
                remote.sha256 is None or known.get("sha256") == remote.sha256):
            echo(f"{target}: present and verified, skipped")
            done.append(target)
            continue
        try:
            download(remote.url, target, remote.sha256, remote.size, progress=progress)
        except FetchError as exc:
            if source.manual:
                raise FetchError(f"{exc}\n{source.manual.format(dest=dest_dir)}") from None
            raise
        entry = manifest[remote.file] = {"url": remote.url, "size": target.stat().st_size,
                                         "sha256": sha256_of(target)}
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        echo(f"{target}: {entry['size']} bytes, sha256 {entry['sha256'][:16]}...")
        done.append(target)
    return done

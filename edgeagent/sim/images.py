"""Container images in the sim: a registry catalog (how long a pull takes, which images do not exist or crash)
and each node's image store, which the node reports in `status.images`.

Pre-pulling only means something if starting a container costs a download the first time and nothing the
second; this module is where that cost lives. The catalog is cluster-wide (one registry), the image store is
per node (one containerd), and a pull shared by several pods on a node happens once, as with a real runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgeagent.kube.images import normalize_image

JSON = dict[str, Any]

DEFAULT_PULL_SECONDS = 0.5
# The kubelet's back-off for image pulls and container restarts (pkg/kubelet: 10 s doubling to 5 min).
BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0
# kubelet --node-status-max-images default.
NODE_STATUS_MAX_IMAGES = 50


def backoff_delay(failures: int, initial: float = BACKOFF_INITIAL, cap: float = BACKOFF_MAX) -> float:
    """Delay before retry number `failures` (1-based): initial, doubling, capped — the kubelet's back-off."""
    if failures <= 0 or initial <= 0:
        return 0.0
    exponent = min(failures - 1, 64)
    return min(cap, initial * math.pow(2.0, exponent))


def image_digest(image: str) -> str:
    return "sha256:" + hashlib.sha256(("image/" + normalize_image(image)).encode()).hexdigest()


def runtime_image(image: str) -> tuple[str, str]:
    """`(image, imageID)` as a containerd kubelet reports a started container: the fully qualified reference
    (`docker.io/library/nginx:1.19.4`) and the repository with the digest (`docker.io/library/nginx@sha256:…`),
    whatever short form the pod spec used."""
    ref = normalize_image(image)
    repo = ref.split("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    return ref, f"{repo}@{image_digest(image)}"


def image_size(image: str) -> int:
    """A stable, plausible size (20-120 MB) so `status.images` looks like a node's."""
    seed = int(hashlib.sha256(normalize_image(image).encode()).hexdigest()[:8], 16)
    return 20_000_000 + seed % 100_000_000


class PullError(Exception):
    """A pull the registry refused; `reason` is what the kubelet reports (ErrImagePull, ErrImageNeverPull)."""

    def __init__(self, image: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.image = image
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ImageSpec:
    """What the registry does with one image (set through `POST /sim/v1/images`)."""

    image: str
    pull_seconds: float | None = None  # None: the sim's --image-pull-seconds
    missing: bool = False  # the registry does not have it: pulls fail with ErrImagePull
    crash: bool = False  # it exists, but its containers exit with code 1 right after starting
    # With crash: its containers run Ready this long before each crash (a readiness probe passes, then the process
    # dies), as a real crash-looping version often does; 0: they exit at once, never Ready.
    ready_seconds: float = 0.0

    def as_json(self, default_pull: float) -> JSON:
        out: JSON = {"image": self.image, "pullSeconds": self.pull_seconds if self.pull_seconds is not None
                     else default_pull, "missing": self.missing, "crash": self.crash}
        if self.ready_seconds:
            out["readySeconds"] = self.ready_seconds
        return out

    def saved(self) -> JSON:
        """As written to the state directory: an unset pullSeconds stays unset (it follows the default)."""
        out: JSON = {"image": self.image, "pullSeconds": self.pull_seconds, "missing": self.missing,
                     "crash": self.crash}
        if self.ready_seconds:
            out["readySeconds"] = self.ready_seconds
        return out


class ImageCatalog:
    """The registry every node pulls from. Changing an entry wakes pods waiting in back-off (see `changed`).

    `persist`, when set, is called with every entry before it takes effect (sim/persist.py), so a sim restarted
    on the same directory keeps its registry: an image said to be missing must not turn up after a restart.
    """

    def __init__(self, default_pull_seconds: float = DEFAULT_PULL_SECONDS) -> None:
        self.default_pull_seconds = default_pull_seconds
        self._specs: dict[str, ImageSpec] = {}
        self._listeners: list[Callable[[], None]] = []
        self.persist: Callable[[list[JSON]], None] | None = None

    def spec(self, image: str) -> ImageSpec:
        return self._specs.get(normalize_image(image)) or ImageSpec(image)

    def pull_seconds(self, image: str) -> float:
        spec = self.spec(image)
        return self.default_pull_seconds if spec.pull_seconds is None else spec.pull_seconds

    def set(self, spec: ImageSpec) -> None:
        specs = {**self._specs, normalize_image(spec.image): spec}
        if self.persist is not None:
            self.persist([entry.saved() for entry in specs.values()])  # first: nothing half-done if it fails
        self._specs = specs
        for listener in list(self._listeners):
            listener()

    def saved(self) -> list[JSON]:
        return [spec.saved() for spec in self._specs.values()]

    def restore(self, saved: list[JSON]) -> None:
        """Take back the entries of an earlier run (validated as a POST body would be)."""
        specs: dict[str, ImageSpec] = {}
        for entry in saved:
            spec = self.parse({k: v for k, v in entry.items() if v is not None})
            specs[normalize_image(spec.image)] = spec
        self._specs = specs

    def items(self) -> list[JSON]:
        return [spec.as_json(self.default_pull_seconds) for spec in self._specs.values()]

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    @staticmethod
    def parse(body: Any) -> ImageSpec:
        """Validate a `POST /sim/v1/images` body; ValueError says which field is wrong."""
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
        unknown = sorted(set(body) - {"image", "pullSeconds", "missing", "crash", "readySeconds"})
        if unknown:
            raise ValueError(f"unknown field(s): {', '.join(unknown)}")
        image = body.get("image")
        if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
            raise ValueError("image: must be a non-empty image reference without spaces")
        pull = body.get("pullSeconds")
        if pull is not None and (isinstance(pull, bool) or not isinstance(pull, int | float)
                                 or not math.isfinite(pull) or pull < 0):
            raise ValueError("pullSeconds: must be a number >= 0")
        flags: dict[str, bool] = {}
        for name in ("missing", "crash"):
            value = body.get(name, False)
            if not isinstance(value, bool):
                raise ValueError(f"{name}: must be true or false")
            flags[name] = value
        ready = body.get("readySeconds", 0)
        if isinstance(ready, bool) or not isinstance(ready, int | float) or not math.isfinite(ready) or ready < 0:
            raise ValueError("readySeconds: must be a number >= 0")
        if ready and not flags["crash"]:
            raise ValueError(
                "readySeconds: only with \"crash\": true (how long a container is Ready before each crash)")
        return ImageSpec(image.strip(), None if pull is None else float(pull), flags["missing"], flags["crash"],
                         float(ready))


class NodeImages:
    """One node's container runtime image store: what is present, and the pulls in flight."""

    def __init__(self, catalog: ImageCatalog, on_pulled: Callable[[], None] | None = None) -> None:
        self.catalog = catalog
        self.on_pulled = on_pulled
        self._present: dict[str, str] = {}  # normalized -> the reference first pulled as
        self._pulls: dict[str, asyncio.Task[None]] = {}
        self.dirty = False  # status.images not yet published

    def seed(self, node: JSON) -> None:
        """Take over the images a node object lists (its tag names; digests are recomputed)."""
        for entry in (node.get("status") or {}).get("images") or []:
            for name in entry.get("names") or []:
                if "@" not in str(name):
                    self._present.setdefault(normalize_image(str(name)), str(name))

    def preload(self, count: int) -> None:
        """A new node's base images (`--node-images`): present without a pull, listed at the next status."""
        for i in range(count):
            image = f"registry.local/base/image-{i:03d}:1"
            self._present.setdefault(normalize_image(image), image)
        self.dirty = self.dirty or count > 0

    def has(self, image: str) -> bool:
        return normalize_image(image) in self._present

    async def ensure(self, image: str, policy: str) -> None:
        """Make `image` present according to the container's imagePullPolicy; PullError when it cannot be."""
        key = normalize_image(image)
        present = key in self._present
        if policy == "Never":
            if not present:
                raise PullError(image, "ErrImageNeverPull",
                                f'Container image "{image}" is not present with pull policy of Never')
            return
        if present and policy != "Always":
            return
        spec = self.catalog.spec(image)
        if spec.missing:
            raise PullError(image, "ErrImagePull", f'failed to pull and unpack image "{normalize_image(image)}": '
                            f'failed to resolve reference "{normalize_image(image)}": '
                            f"{normalize_image(image)}: not found")
        if present:  # Always, and the registry has the same digest: only the manifest is checked
            return
        task = self._pulls.get(key)
        if task is None:
            task = asyncio.create_task(self._pull(key, image), name=f"pull {key}")
            self._pulls[key] = task
        await asyncio.shield(task)

    async def _pull(self, key: str, image: str) -> None:
        try:
            await asyncio.sleep(self.catalog.pull_seconds(image))
            self._present.setdefault(key, image)
            self.dirty = True
            if self.on_pulled is not None:
                self.on_pulled()
        finally:
            self._pulls.pop(key, None)

    def status_images(self) -> list[JSON]:
        """`status.images` as a containerd kubelet reports it: largest first, at most NODE_STATUS_MAX_IMAGES, each
        named only by its fully qualified references (digest and tag), never the short form a pod spec used."""
        entries: list[tuple[int, str, JSON]] = []
        for key in self._present:
            ref, digest_ref = runtime_image(key)
            names = [digest_ref, ref]
            size = image_size(key)
            entries.append((-size, key, {"names": names, "sizeBytes": size}))
        entries.sort(key=lambda e: (e[0], e[1]))
        return [entry for _, _, entry in entries[:NODE_STATUS_MAX_IMAGES]]

    async def close(self) -> None:
        tasks = list(self._pulls.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

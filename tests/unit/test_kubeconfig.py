"""The native kubeconfig / in-cluster loader: every supported field, the fallback triggers, and every error."""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgeagent.kube.kubeconfig import (
    ClusterAccess,
    NeedsFallback,
    TokenSource,
    load_incluster,
    load_kubeconfig,
    resolve_kubeconfig_path,
    ssl_context,
)

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(
    OPENSSL is None, reason="TLS material tests need the openssl CLI (the cryptography package is not installed)"
)


def make_tls_material(directory: Path, server_name: str = "kube-test") -> dict[str, Path]:
    """A throwaway CA, a server certificate for `server_name` and a client certificate, via the openssl CLI."""
    assert OPENSSL is not None
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([OPENSSL, *args], cwd=directory, check=True, capture_output=True, timeout=30)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=edgeagent-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, ext in (("server", f"subjectAltName=DNS:{server_name}\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        (directory / f"{name}.ext").write_text(ext)
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext")
    return {n: directory / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    directory: Path,
    *,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    current: str | None = "ctx",
    name: str = "config",
    **top: Any,
) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }
    if current is not None:
        doc["current-context"] = current
    doc.update(top)
    path = directory / name
    path.write_text(yaml.safe_dump(doc))
    return path


# --- paths -----------------------------------------------------------------------------------------------------


def test_explicit_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"kubeconfig not found: .*nope"):
        resolve_kubeconfig_path(tmp_path / "nope", {})


def test_kubeconfig_env_takes_first_existing_file(tmp_path: Path) -> None:
    second = write_kubeconfig(tmp_path, name="second")
    third = write_kubeconfig(tmp_path, name="third")
    env = {"KUBECONFIG": os.pathsep.join([str(tmp_path / "missing"), str(second), str(third)])}
    assert resolve_kubeconfig_path(None, env) == str(second)


def test_kubeconfig_env_with_only_missing_files_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="none of the files in KUBECONFIG"):
        resolve_kubeconfig_path(None, {"KUBECONFIG": str(tmp_path / "a")})


def test_no_kubeconfig_anywhere_means_in_cluster(tmp_path: Path) -> None:
    assert resolve_kubeconfig_path(None, {}) is None
    assert resolve_kubeconfig_path(None, {"KUBECONFIG": ""}) is None


def test_missing_file_named_in_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="kubeconfig not found"):
        load_kubeconfig(tmp_path / "absent")


# --- contexts, clusters, users ---------------------------------------------------------------------------------


def test_current_context_selects_cluster_and_user(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, user={"token": "abc"})
    doc = yaml.safe_load(path.read_text())
    doc["clusters"].append({"name": "other", "cluster": {"server": "http://127.0.0.1:1/"}})
    doc["users"].append({"name": "other", "user": {"token": "other-token"}})
    doc["contexts"].append({"name": "second", "context": {"cluster": "other", "user": "other"}})
    doc["current-context"] = "second"
    path.write_text(yaml.safe_dump(doc))
    access = load_kubeconfig(path)
    assert access.server == "http://127.0.0.1:1"  # trailing slash dropped
    assert access.token == "other-token"
    assert not access.is_https


def test_only_context_used_without_current_context(tmp_path: Path) -> None:
    access = load_kubeconfig(write_kubeconfig(tmp_path, current=None, user={"token": "t"}))
    assert access.server == "https://127.0.0.1:6443"
    assert access.token == "t"


def test_several_contexts_without_current_context_is_an_error(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, current=None)
    doc = yaml.safe_load(path.read_text())
    doc["contexts"].append({"name": "x", "context": {"cluster": "c"}})
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"kubeconfig .*config: 'current-context' is not set and there are 2"):
        load_kubeconfig(path)


def test_no_contexts_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"kubeconfig .*config: no contexts defined"):
        load_kubeconfig(write_kubeconfig(tmp_path, contexts=[]))


def test_unknown_current_context_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="current-context 'ghost' not found in 'contexts'"):
        load_kubeconfig(write_kubeconfig(tmp_path, current="ghost"))


def test_missing_cluster_is_an_error(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, clusters=[{"name": "other", "cluster": {"server": "http://x"}}])
    with pytest.raises(ValueError, match="cluster 'c' not found in 'clusters'"):
        load_kubeconfig(path)


def test_missing_user_is_an_error(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, users=[])
    with pytest.raises(ValueError, match="user 'u' not found in 'users'"):
        load_kubeconfig(path)


def test_context_without_user_is_anonymous(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, contexts=[{"name": "ctx", "context": {"cluster": "c"}}], users=None)
    access = load_kubeconfig(path)
    assert (access.token, access.token_file, access.username, access.client_cert_file) == (None, None, None, None)


def test_missing_server_is_an_error(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, clusters=[{"name": "c", "cluster": {}}])
    with pytest.raises(ValueError, match=r"\(cluster 'c'\): 'server' is missing"):
        load_kubeconfig(path)


def test_server_without_scheme_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'server' must start with http:// or https://"):
        load_kubeconfig(write_kubeconfig(tmp_path, cluster={"server": "127.0.0.1:6443"}))


def test_not_yaml_mapping_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="not a kubeconfig"):
        load_kubeconfig(path)
    path.write_text("clusters: [unclosed\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_kubeconfig(path)


# --- cluster fields --------------------------------------------------------------------------------------------


def test_cluster_tls_fields(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_text("pem")
    access = load_kubeconfig(write_kubeconfig(
        tmp_path,
        cluster={"certificate-authority": "certs/ca.crt", "tls-server-name": "kubernetes.default",
                 "insecure-skip-tls-verify": False},
    ))
    assert access.ca_file == str((tmp_path / "certs" / "ca.crt").resolve())  # relative to the kubeconfig
    assert access.tls_server_name == "kubernetes.default"
    assert access.insecure_skip_tls_verify is False
    assert access.is_https


def test_certificate_authority_data_wins_over_file(tmp_path: Path) -> None:
    data = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    access = load_kubeconfig(write_kubeconfig(
        tmp_path, cluster={"certificate-authority-data": data, "certificate-authority": "/nonexistent"}
    ))
    assert access.ca_data == "-----BEGIN CERTIFICATE-----\n"
    assert access.ca_file is None


def test_missing_certificate_authority_file_names_field(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"\(cluster 'c'\): 'certificate-authority' file not found"):
        load_kubeconfig(write_kubeconfig(tmp_path, cluster={"certificate-authority": "ca.crt"}))


def test_bad_base64_names_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'certificate-authority-data' is not valid base64"):
        load_kubeconfig(write_kubeconfig(tmp_path, cluster={"certificate-authority-data": "***"}))


def test_insecure_skip_tls_verify_must_be_bool(tmp_path: Path) -> None:
    access = load_kubeconfig(write_kubeconfig(tmp_path, cluster={"insecure-skip-tls-verify": True}))
    assert access.insecure_skip_tls_verify is True
    with pytest.raises(ValueError, match="'insecure-skip-tls-verify' must be true or false"):
        load_kubeconfig(write_kubeconfig(tmp_path, cluster={"insecure-skip-tls-verify": "yes please"}))


def test_insecure_skip_tls_verify_disables_verification(tmp_path: Path) -> None:
    ctx = ssl_context(load_kubeconfig(write_kubeconfig(tmp_path, cluster={"insecure-skip-tls-verify": True})))
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.check_hostname is False


def test_plain_http_has_no_tls_context(tmp_path: Path) -> None:
    assert ssl_context(load_kubeconfig(write_kubeconfig(tmp_path, cluster={"server": "http://127.0.0.1:1"}))) is None


def test_proxy_url_needs_fallback(tmp_path: Path) -> None:
    with pytest.raises(NeedsFallback, match="proxy-url"):
        load_kubeconfig(write_kubeconfig(tmp_path, cluster={"proxy-url": "http://proxy:3128"}))


# --- user fields -----------------------------------------------------------------------------------------------


def test_token_file_relative_to_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("file-token\n")
    access = load_kubeconfig(write_kubeconfig(tmp_path, user={"tokenFile": "token"}))
    assert access.token_file == str((tmp_path / "token").resolve())
    assert TokenSource(access).get() == "file-token"


def test_missing_token_file_names_field(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"\(user 'u'\): 'tokenFile' file not found"):
        load_kubeconfig(write_kubeconfig(tmp_path, user={"tokenFile": "nope"}))


def test_basic_auth(tmp_path: Path) -> None:
    access = load_kubeconfig(write_kubeconfig(tmp_path, user={"username": "admin", "password": "pw"}))
    assert (access.username, access.password) == ("admin", "pw")
    with pytest.raises(ValueError, match="'password' is set without 'username'"):
        load_kubeconfig(write_kubeconfig(tmp_path, user={"password": "pw"}))


@pytest.mark.parametrize("plugin", ["exec", "auth-provider"])
def test_plugin_users_need_fallback(tmp_path: Path, plugin: str) -> None:
    with pytest.raises(NeedsFallback, match=f"user 'u'.*'{plugin}'"):
        load_kubeconfig(write_kubeconfig(tmp_path, user={plugin: {"command": "x", "name": "gcp"}}))


def test_client_cert_paths_resolved(tmp_path: Path) -> None:
    (tmp_path / "c.crt").write_text("c")
    (tmp_path / "c.key").write_text("k")
    access = load_kubeconfig(write_kubeconfig(tmp_path, user={"client-certificate": "c.crt", "client-key": "c.key"}))
    assert access.client_cert_file == str((tmp_path / "c.crt").resolve())
    assert access.client_key_file == str((tmp_path / "c.key").resolve())


def test_client_cert_data_decoded(tmp_path: Path) -> None:
    user = {"client-certificate-data": base64.b64encode(b"CERT").decode(),
            "client-key-data": base64.b64encode(b"KEY").decode()}
    access = load_kubeconfig(write_kubeconfig(tmp_path, user=user))
    assert (access.client_cert_data, access.client_key_data) == (b"CERT", b"KEY")


def test_client_cert_without_key_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "c.crt").write_text("c")
    with pytest.raises(ValueError, match=r"'client-key' .* is missing"):
        load_kubeconfig(write_kubeconfig(tmp_path, user={"client-certificate": "c.crt"}))


def test_secrets_not_in_repr(tmp_path: Path) -> None:
    access = load_kubeconfig(write_kubeconfig(tmp_path, user={"token": "s3cr3t", "username": "a", "password": "pw"}))
    assert "s3cr3t" not in repr(access)
    assert "pw" not in repr(access)


# --- token refresh ---------------------------------------------------------------------------------------------


def test_token_file_is_reread_after_refresh_interval(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    now = [100.0]
    # Change detection off (a file system whose stat does not show the change): the periodic re-read remains.
    source = TokenSource(ClusterAccess(server="https://x", source="test", token_file=str(token)),
                         refresh=60.0, clock=lambda: now[0], check_interval=3600.0)
    assert source.get() == "one"
    token.write_text("two")
    now[0] += 59.0
    assert source.get() == "one"  # not yet
    now[0] += 1.0
    assert source.get() == "two"


def test_token_file_read_failure_keeps_last_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    now = [0.0]
    source = TokenSource(ClusterAccess(server="https://x", source="test", token_file=str(token)),
                         refresh=1.0, clock=lambda: now[0])
    token.unlink()
    now[0] = 5.0
    assert source.get() == "one"


def test_token_file_wins_over_static_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file")
    access = load_kubeconfig(write_kubeconfig(tmp_path, user={"token": "static", "tokenFile": "token"}))
    assert TokenSource(access).get() == "from-file"
    assert TokenSource(ClusterAccess(server="https://x", source="t", token="static")).get() == "static"


def test_empty_token_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    with pytest.raises(ValueError, match=r"token file .* is empty"):
        TokenSource(ClusterAccess(server="https://x", source="t", token_file=str(tmp_path / "token")))


# --- in-cluster ------------------------------------------------------------------------------------------------


def test_in_cluster(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("pem")
    access = load_incluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert access.server == "https://10.0.0.1:443"
    assert access.ca_file == str(tmp_path / "ca.crt")
    assert TokenSource(access).get() == "sa-token"
    v6 = load_incluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert v6.server == "https://[fd00::1]:443"


def test_in_cluster_without_env_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not running in a cluster"):
        load_incluster({}, tmp_path)


def test_in_cluster_without_token_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("pem")
    with pytest.raises(FileNotFoundError, match=r"service account file not found: .*token"):
        load_incluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)


# --- TLS material ----------------------------------------------------------------------------------------------


@needs_openssl
def test_ca_and_client_cert_data_load_and_temp_files_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = make_tls_material(tmp_path / "tls")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    access = load_kubeconfig(write_kubeconfig(
        tmp_path,
        cluster={"certificate-authority-data": b64(tls["ca.crt"])},
        user={"client-certificate-data": b64(tls["client.crt"]), "client-key-data": b64(tls["client.key"])},
    ))
    ctx = ssl_context(access)
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "edgeagent-test-ca"),),)]
    assert list(scratch.iterdir()) == []  # key material does not outlive loading


@needs_openssl
def test_ca_and_client_cert_files_load(tmp_path: Path) -> None:
    make_tls_material(tmp_path / "tls")
    access = load_kubeconfig(write_kubeconfig(
        tmp_path,
        cluster={"certificate-authority": "tls/ca.crt"},
        user={"client-certificate": "tls/client.crt", "client-key": "tls/client.key"},
    ))
    ctx = ssl_context(access)
    assert ctx is not None
    assert len(ctx.get_ca_certs()) == 1  # only the kubeconfig's CA, not the system store


def test_unreadable_ca_names_field(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    access = load_kubeconfig(write_kubeconfig(tmp_path, cluster={"certificate-authority": "ca.crt"}))
    with pytest.raises(ValueError, match=r"kubeconfig .*config: cannot load 'certificate-authority'"):
        ssl_context(access)
    bad_data = base64.b64encode(b"garbage").decode()
    access = load_kubeconfig(write_kubeconfig(tmp_path, cluster={"certificate-authority-data": bad_data}))
    with pytest.raises(ValueError, match="cannot load 'certificate-authority-data'"):
        ssl_context(access)


@needs_openssl
def test_unreadable_client_key_names_field(tmp_path: Path) -> None:
    tls = make_tls_material(tmp_path / "tls")
    access = load_kubeconfig(write_kubeconfig(
        tmp_path,
        cluster={"certificate-authority": "tls/ca.crt"},
        user={"client-certificate-data": b64(tls["client.crt"]),
              "client-key-data": base64.b64encode(b"not a key").decode()},
    ))
    with pytest.raises(ValueError, match="cannot load 'client-certificate' / 'client-key'"):
        ssl_context(access)


def test_token_file_is_reread_when_it_changes_not_only_every_refresh(tmp_path: Path) -> None:
    """Issue 14.1: a swapped token file is used from the next check on, not after the 60 s refresh."""
    token = tmp_path / "token"
    token.write_text("old")
    now = [100.0]
    source = TokenSource(ClusterAccess(server="https://x", source="t", token_file=str(token)),
                         refresh=3600.0, clock=lambda: now[0], check_interval=1.0)
    assert source.get() == "old"
    fresh = tmp_path / "token.new"
    fresh.write_text("new")
    fresh.replace(token)
    assert source.get() == "old"  # within the check interval: no stat at all
    now[0] += 1.0
    assert source.get() == "new"


def test_own_namespace_is_the_service_accounts_else_edgeagent_system(tmp_path: Path) -> None:
    """Issue 14.5: the controller's default Lease namespace is where it runs, where deploy/ grants Leases."""
    from edgeagent.kube.kubeconfig import own_namespace

    assert own_namespace(tmp_path) == "edgeagent-system"
    (tmp_path / "namespace").write_text("ops\n")
    assert own_namespace(tmp_path) == "ops"

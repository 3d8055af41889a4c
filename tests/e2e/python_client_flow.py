"""A function's life through a Python client generated from sless's OpenAPI
document (tests/e2e/python_client.rs runs it against `sless dev`).

Only the generated package is used to talk to sless: its
`AuthenticatedClient` with the dev token, its `Client` for the functions'
origin, and its `api.*` operations. Each step checks the status and the
parsed answer; the first that fails ends the script with exit status 1 and
says which step, what came back and why.

Usage: python_client_flow.py PACKAGE_DIR EXAMPLE_DIR, with SLESS_URL,
SLESS_FN_URL, SLESS_TOKEN and SLESS_NAMESPACE set (dev.json's members).
"""

import io
import json
import os
import sys
import time
import zipfile

PACKAGE_DIR, EXAMPLE_DIR = sys.argv[1], sys.argv[2]
sys.path.insert(0, PACKAGE_DIR)

from sless_client import AuthenticatedClient, Client  # noqa: E402
from sless_client.api.functions import (  # noqa: E402
    create_function,
    get_function,
    list_functions,
    upload_function_source,
)
from sless_client.api.invoke import invoke_function_get  # noqa: E402
from sless_client.api.versions import (  # noqa: E402
    get_function_version_archive,
    list_function_versions,
    rollback_function,
)
from sless_client.models import CreateFunction, Rollback  # noqa: E402
from sless_client.types import File, Unset  # noqa: E402

NAME = "hello-py-client"
# As long as the Rust end-to-end tests give a first build.
READY_DEADLINE = 120.0


def fail(step, why, response=None):
    print(f"FAILED at {step}: {why}", file=sys.stderr)
    if response is not None:
        body = response.content.decode("utf-8", "replace")
        print(f"  status {int(response.status_code)}: {body[:2000]}", file=sys.stderr)
    sys.exit(1)


def call(step, operation, statuses, **kwargs):
    """Runs the generated `operation.sync_detailed` and returns its answer,
    failing unless its status is one of `statuses`."""
    try:
        response = operation.sync_detailed(**kwargs)
    except Exception as e:  # the client could not send or parse it
        fail(step, f"{type(e).__name__}: {e}")
    if int(response.status_code) not in statuses:
        fail(step, f"expected status {statuses}", response)
    print(f"ok: {step} ({int(response.status_code)})")
    return response


def zip_of(files):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return out.getvalue()


def eventually(step, holds):
    """Asks `holds()` again until it is true, within READY_DEADLINE."""
    deadline = time.monotonic() + READY_DEADLINE
    while not holds():
        if time.monotonic() > deadline:
            fail(step, f"not within {READY_DEADLINE} s")
        time.sleep(0.25)


def ready(version):
    """The function's view: Ready, `version` its live version and the one that runs."""
    return lambda f: (f.phase, f.version, f.deployed_version) == ("Ready", version, version)


def wait_until(step, function_view_ok, api, ns):
    """Polls the function until `function_view_ok(view)` holds, within
    READY_DEADLINE; a Failed phase fails at once."""
    deadline = time.monotonic() + READY_DEADLINE
    while True:
        response = get_function.sync_detailed(ns, NAME, client=api)
        view = response.parsed
        if int(response.status_code) == 200:
            if view.phase == "Failed":
                fail(step, f"the function failed: {view.last_error}", response)
            if function_view_ok(view):
                print(f"ok: {step} (phase {view.phase}, deployed {view.deployed_version})")
                return view
        if time.monotonic() > deadline:
            fail(step, f"not within {READY_DEADLINE} s", response)
        time.sleep(0.25)


def invoke(fn, ns, step):
    response = call(step, invoke_function_get, {200}, ns=ns, name=NAME, client=fn)
    return json.loads(response.content)["message"]


def main():
    ns = os.environ["SLESS_NAMESPACE"]
    api = AuthenticatedClient(base_url=os.environ["SLESS_URL"], token=os.environ["SLESS_TOKEN"])
    fn = Client(base_url=os.environ["SLESS_FN_URL"])

    handler = open(os.path.join(EXAMPLE_DIR, "handler.py")).read()
    changed = handler.replace('f"hello, {name}"', 'f"hi, {name}"')
    if changed == handler:
        fail("the changed source", "handler.py no longer says hello, {name}")
    v1, v2 = zip_of({"handler.py": handler}), zip_of({"handler.py": changed})

    created = call(
        "create the function",
        create_function,
        {201},
        ns=ns,
        client=api,
        body=CreateFunction(name=NAME, runtime="python3.11", entrypoint="handler.handle"),
    ).parsed
    if created.name != NAME or created.runtime != "python3.11":
        fail("create the function", f"answered {created}")

    uploaded = call(
        "upload version 1 (application/octet-stream)",
        upload_function_source,
        {202},
        ns=ns,
        name=NAME,
        client=api,
        body=File(payload=io.BytesIO(v1), file_name="v1.zip"),
    ).parsed
    if uploaded.version != 1 or uploaded.size != len(v1):
        fail("upload version 1", f"answered {uploaded}")

    # Reads follow the log a moment later: the version shows once it is
    # Ready, below.
    got = call("get the function", get_function, {200}, ns=ns, name=NAME, client=api).parsed
    if (got.name, got.runtime, got.entrypoint) != (NAME, "python3.11", "handler.handle"):
        fail("get the function", f"answered {got}")

    def listed():
        page = call("list the functions", list_functions, {200}, ns=ns, client=api).parsed
        return NAME in [f.name for f in page.items]

    eventually("the function listed", listed)

    wait_until("version 1 Ready", ready(1), api, ns)
    if (message := invoke(fn, ns, "invoke version 1")) != "hello, world":
        fail("invoke version 1", f"answered {message!r}")

    archive = call(
        "download version 1's zip",
        get_function_version_archive,
        {200},
        ns=ns,
        name=NAME,
        version=1,
        client=api,
    ).parsed
    if archive is None or archive.payload.read() != v1:
        fail("download version 1's zip", "not the zip that was uploaded")

    uploaded = call(
        "upload a changed zip",
        upload_function_source,
        {202},
        ns=ns,
        name=NAME,
        client=api,
        body=File(payload=io.BytesIO(v2), file_name="v2.zip"),
    ).parsed
    if uploaded.version != 2:
        fail("upload a changed zip", f"answered {uploaded}")
    wait_until("version 2 Ready", ready(2), api, ns)
    if (message := invoke(fn, ns, "invoke version 2")) != "hi, world":
        fail("invoke version 2", f"answered {message!r}")

    versions = call(
        "list the versions", list_function_versions, {200}, ns=ns, name=NAME, client=api
    ).parsed
    if [v.version for v in versions.items] != [2, 1] or versions.live_version != 2:
        fail("list the versions", f"answered {versions}")

    call(
        "roll back to version 1",
        rollback_function,
        {202},
        ns=ns,
        name=NAME,
        client=api,
        body=Rollback(version=1),
    )
    wait_until("version 1 live again", ready(1), api, ns)
    versions = call(
        "list the versions after the rollback",
        list_function_versions,
        {200},
        ns=ns,
        name=NAME,
        client=api,
    ).parsed
    live = [v.version for v in versions.items if v.live]
    if versions.live_version != 1 or live != [1]:
        fail("the live version after the rollback", f"live_version {versions.live_version}, live {live}")
    if (message := invoke(fn, ns, "invoke after the rollback")) != "hello, world":
        fail("invoke after the rollback", f"answered {message!r}")
    if isinstance(versions.deployed_version, Unset) or versions.deployed_version != 1:
        fail("the deployed version after the rollback", f"{versions.deployed_version}")
    print("the generated client created, uploaded, listed, rolled back: all steps passed")


if __name__ == "__main__":
    main()

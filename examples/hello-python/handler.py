"""Example sless function (runtime python3.11, entrypoint handler.handle)."""


def handle(event):
    body = event.get("json")
    name = event["query"].get("name")
    if not name and isinstance(body, dict):
        name = body.get("name")
    if not name:
        name = "world"
    return {
        "message": f"hello, {name}",
        "method": event["method"],
        "path": event["path"],
    }

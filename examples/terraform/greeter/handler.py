"""The function of examples/terraform (runtime python3.11, entrypoint
handler.handle): greets whoever the query, the JSON body or a job's input
names, with the greeting its environment sets."""

import os


def handle(event):
    body = event.get("json")
    name = event["query"].get("name")
    if not name and isinstance(body, dict):
        name = body.get("name")
    greeting = os.environ.get("GREETING", "hello")
    return {"message": f"{greeting}, {name or 'world'}", "method": event["method"]}

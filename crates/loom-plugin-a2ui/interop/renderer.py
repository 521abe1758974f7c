"""The reference renderer (`a2ui-core` 0.4.0, STRICT validation) driven by Loom's interop check.

Usage:
  renderer.py serve CATALOGS_JSON     one JSON request per stdin line, one JSON answer per line
  renderer.py check CATALOGS_JSON STREAM_JSONL
  renderer.py check-v0_9 STREAM_JSONL       the same check of A2UI v0.9 messages, v0.9 basic catalog

CATALOGS_JSON is a JSON array of v1.0 catalog documents written by the plugin (the basic catalog
comes from the SDK itself). Functions named in the documents get Python implementations here.

serve requests:
  {"message": <agent-to-renderer message>}
      -> {"ok": true, "responses": [...], "model": {surfaceId: dataModel, ...}}
  {"action": {"surfaceId": ..., "componentId": ..., "action": {...}}}
      -> {"ok": true, "actions": [<renderer-to-agent action message>...]}
  any refusal -> {"ok": false, "error": "..."}
check: every line is {"message": m, "expect": model-or-null, "surfaceId": s}; the renderer must
accept every message and, where `expect` is given, hold exactly that data model afterwards.
"""

import asyncio
import json
import sys

from a2ui.core import STRICT_VALIDATION, Catalog, MessageProcessor, MessageProcessorOptions
from a2ui.core.basic_catalog.v1_0 import BasicCatalog
from a2ui.core.catalog import FunctionImplementation

BASIC_ID = "https://a2ui.org/specification/v1_0/catalogs/basic/catalog.json"

IMPLEMENTATIONS = {
    "getLocale": lambda args, *rest: "fr-CH",
    "confirm": lambda args, *rest: True,
    "formatThing": lambda args, *rest: "thing",
}


def load_catalogs(path):
    with open(path) as f:
        documents = json.load(f)
    catalogs = [BasicCatalog()]
    for document in documents:
        # Every document the plugin writes must load, the basic part included; the SDK's own
        # BasicCatalog stands for the basic catalog, since it carries the implementations.
        catalog = Catalog.from_json(document)
        if document.get("catalogId") == BASIC_ID:
            continue
        functions = []
        for name, spec in (document.get("functions") or {}).items():
            functions.append(
                FunctionImplementation(
                    name=name,
                    return_type=spec.get("returnType", "any"),
                    schema=spec,
                    execute=IMPLEMENTATIONS.get(name, lambda args, *rest: None),
                    allowed_callers=spec.get("allowedCallers", "rendererOnly"),
                )
            )
        if functions:
            catalog = catalog.copy_with(functions=functions)
        catalogs.append(catalog)
    return catalogs


class Renderer:
    def __init__(self, catalogs):
        self.actions = []
        self.outbound = []
        self.processor = MessageProcessor(
            catalogs,
            action_handler=lambda action: self.actions.append(action),
            options=MessageProcessorOptions(
                validation_config=STRICT_VALIDATION,
                outbound_listener=lambda message: self.outbound.append(message),
            ),
        )

    def models(self):
        return {
            sid: surface.data_model.get("/")
            for sid, surface in self.processor.model.surfaces.items()
        }

    async def message(self, message):
        self.outbound.clear()
        responses = await self.processor.process_messages_async([message])
        return {"ok": True, "responses": responses, "model": self.models()}

    def action(self, request):
        self.actions.clear()
        surface = self.processor.model.surfaces[request["surfaceId"]]
        surface.dispatch_action(request["action"], request["componentId"])
        return {
            "ok": True,
            "actions": [{"version": "v1.0", "action": a} for a in self.actions],
        }


async def serve(catalogs_path):
    renderer = Renderer(load_catalogs(catalogs_path))
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
            if "message" in request:
                answer = await renderer.message(request["message"])
            elif "action" in request:
                answer = renderer.action(request["action"])
            else:
                answer = {"ok": False, "error": f"unknown request {sorted(request)}"}
        except Exception as error:  # every refusal goes back to the driver, typed by name
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


async def check(catalogs_path, stream_path):
    if catalogs_path is None:
        from a2ui.core.basic_catalog.v0_9 import BasicCatalog as BasicCatalogV09
        renderer = Renderer([BasicCatalogV09()])
    else:
        renderer = Renderer(load_catalogs(catalogs_path))
    count = 0
    compared = 0
    with open(stream_path) as f:
        for number, line in enumerate(f, start=1):
            entry = json.loads(line)
            try:
                answer = await renderer.message(entry["message"])
            except Exception as error:
                print(f"line {number}: refused: {type(error).__name__}: {error}")
                return 1
            count += 1
            expect = entry.get("expect")
            if expect is not None:
                got = answer["model"].get(entry["surfaceId"])
                if got != expect:
                    print(f"line {number}: model differs\n  renderer: {json.dumps(got)}\n  loom:     {json.dumps(expect)}")
                    return 1
                compared += 1
    print(f"reference renderer accepted {count} messages; models equal at {compared} checkpoints")
    return 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        asyncio.run(serve(sys.argv[2]))
        return 0
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        return asyncio.run(check(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 3 and sys.argv[1] == "check-v0_9":
        return asyncio.run(check(None, sys.argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())

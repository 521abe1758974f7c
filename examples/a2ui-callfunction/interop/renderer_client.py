"""The reference renderer (`a2ui-core` 0.4.0, STRICT validation) as a client of the example's server.

Usage: renderer_client.py WS_URL EXECUTION CATALOG_DIR CREDENTIAL

Connects to WS_URL/a2ui/EXECUTION/checkout?credential=CREDENTIAL&answers=getLocale (CREDENTIAL:
the renderer credential the server minted for EXECUTION; it answers getLocale, a read; the
headless Rust client answers submitOrder) with its capabilities (the catalogs it loaded, as
`supportedCatalogIds`), feeds every A2UI message to a `MessageProcessor`, and sends back what the
processor answers. When the server goes away it reconnects keeping its processor and the surface
it holds, and says so (`reconnect=1`): the server then sends `deleteSurface` before
`createSurface`, as a surface id may not be created twice. Before it processes the story's final
`deleteSurface` it prints `RENDERER_MODEL <json>`, the surface's data model, for the story to
compare with Loom's masked fold. Any message the processor refuses ends the program
with exit code 1. Notes are JSON lines the story prints.
"""

import asyncio
import glob
import json
import os
import sys
import urllib.parse

import websockets
from a2ui.core import STRICT_VALIDATION, Catalog, MessageProcessor, MessageProcessorOptions
from a2ui.core.basic_catalog.v1_0 import BasicCatalog
from a2ui.core.catalog import FunctionImplementation

BASIC_ID = "https://a2ui.org/specification/v1_0/catalogs/basic/catalog.json"
SURFACE = "checkout"

IMPLEMENTATIONS = {
    "getLocale": lambda args, *rest: "de-CH",
}


def say(text):
    sys.stdout.write(json.dumps({"note": "say", "text": f"reference renderer: {text}"}) + "\n")
    sys.stdout.flush()


def load_catalogs(directory):
    """The catalogs, and their ids as the renderer's capabilities list them."""
    catalogs = [BasicCatalog()]
    ids = [BASIC_ID]
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            document = json.load(f)
        catalog = Catalog.from_json(document)
        if document.get("catalogId") == BASIC_ID:
            continue  # the SDK's own BasicCatalog carries the implementations
        functions = []
        for name, spec in (document.get("functions") or {}).items():
            if name not in IMPLEMENTATIONS:
                continue
            functions.append(
                FunctionImplementation(
                    name=name,
                    return_type=spec.get("returnType", "any"),
                    schema=spec,
                    execute=IMPLEMENTATIONS[name],
                    allowed_callers=spec.get("allowedCallers", "rendererOnly"),
                )
            )
        if functions:
            catalog = catalog.copy_with(functions=functions)
        catalogs.append(catalog)
        ids.append(document["catalogId"])
    return catalogs, ids


def new_processor(catalogs):
    return MessageProcessor(
        catalogs,
        action_handler=lambda action: None,
        options=MessageProcessorOptions(validation_config=STRICT_VALIDATION),
    )


async def session(url, processor, reconnecting):
    """One connection. Returns True once the surface is deleted, False if the socket dropped."""
    async with websockets.connect(url) as socket:
        say(f"connected to {url}")
        first = True
        try:
            async for text in socket:
                message = json.loads(text)
                # A reconnect starts with the server dropping the surface this renderer holds.
                dropping = reconnecting and first and "deleteSurface" in message
                first = False
                if dropping:
                    say("the server drops the surface held since the last connection")
                    await processor.process_messages_async([message])
                    continue
                if "deleteSurface" in message:
                    surface = processor.model.surfaces.get(message["deleteSurface"]["surfaceId"])
                    model = surface.data_model.get("/") if surface is not None else None
                    sys.stdout.write("RENDERER_MODEL " + json.dumps(model) + "\n")
                    sys.stdout.flush()
                try:
                    responses = await processor.process_messages_async([message])
                except Exception as error:
                    say(f"REFUSED {json.dumps(message)}: {type(error).__name__}: {error}")
                    raise SystemExit(1)
                for response in responses or []:
                    await socket.send(json.dumps(response))
                    say(f"answered {json.dumps(response)}")
                if "deleteSurface" in message:
                    say("the surface is deleted; done")
                    return True
        except websockets.ConnectionClosedError:
            return False
    return False


async def main(base, execution, catalog_dir, credential):
    catalogs, ids = load_catalogs(catalog_dir)
    capabilities = urllib.parse.quote(json.dumps({"v1.0": {"supportedCatalogIds": ids}}))
    url = (f"{base.rstrip('/')}/a2ui/{execution}/{SURFACE}?credential={urllib.parse.quote(credential)}"
           f"&answers=getLocale&capabilities={capabilities}")
    processor = new_processor(catalogs)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    quiet = False
    while loop.time() < deadline:
        try:
            # It says it reconnects only when it holds a surface.
            reconnecting = len(processor.model.surfaces) > 0
            if await session(url + ("&reconnect=1" if reconnecting else ""), processor, reconnecting):
                return 0
            say("connection dropped; reconnecting with the surface it holds")
            quiet = False
        except (OSError, websockets.InvalidHandshake, websockets.ConnectionClosed) as error:
            if not quiet:
                say(f"cannot connect yet ({type(error).__name__}); retrying")
                quiet = True
        await asyncio.sleep(0.15)
    say("the surface was not deleted in time")
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__)
        sys.exit(2)
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])))

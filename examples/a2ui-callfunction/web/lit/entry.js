// The official A2UI web renderer for the playground: @a2ui/lit's v0.9 surface element and
// basic catalog, with @a2ui/web_core's message processor, exposed as one global.
import { MessageProcessor } from "@a2ui/web_core/v0_9";
import { A2uiSurface, basicCatalog } from "@a2ui/lit/v0_9";

globalThis.A2uiLit = { MessageProcessor, A2uiSurface, basicCatalog, version: "0.11.0" };

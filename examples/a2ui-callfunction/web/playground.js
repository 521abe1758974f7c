// The A2UI playground: an execution's surface drawn by a renderer from the A2UI wire (SSE down,
// POST up): the official web renderer @a2ui/lit 0.11 (A2UI v0.9) or the page's own small
// renderer of the default catalog (A2UI v1.0, Text, Column, Row, List, Button, Badge); the
// wire beside the native model, the SURFACE_PATCH stream and the log. The page answers the
// flow's function calls itself (getLocale, submitOrder) on a v1.0 session.
"use strict";

const params = new URLSearchParams(location.hash.slice(1));
if (params.get("token")) sessionStorage.setItem("loom-token", params.get("token"));
// A renderer link (`#credential=...`) opens its own execution's surface and wire only; the
// operator's link (`#token=...`) opens everything.
const credential = params.get("credential") || "";
const token = credential ? "" : sessionStorage.getItem("loom-token") || "";
const bearer = token || credential;
const execution = params.get("execution") || "";
const surfaceId = params.get("surface") || "checkout";
const rendererKind = params.get("renderer") === "loom" || !window.A2uiLit ? "loom" : "lit";
const api = "v1/" + encodeURIComponent(execution) + "/" + encodeURIComponent(surfaceId);
// The id the server names this execution's surface by on the wire, from its createSurface.
let wireSurfaceId = surfaceId;
const $ = (id) => document.getElementById(id);

let session = 0;
let functionsSession = 0;
let components = {};
let model = {};
let shown = false;
let deleted = false;
let ended = false;
let offline = false;
let source = null;
let processor = null;
const answered = new Map();

function problem(text) {
  $("problem").hidden = !text;
  $("problem").textContent = text || "";
}

function item(list, text, cls) {
  const li = document.createElement("li");
  li.textContent = text;
  if (cls) li.className = cls;
  $(list).append(li);
}

// Actions are possible only while the server is reachable and the execution runs.
function interactive() {
  $("surface").inert = offline || ended;
}

function pointer(root, path) {
  if (path === "" || path === "/") return root;
  let at = root;
  for (const raw of path.replace(/^\//, "").split("/")) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (at === null || typeof at !== "object") return undefined;
    at = at[key];
  }
  return at;
}

function setPointer(path, value) {
  if (!path || path === "/") {
    model = value === undefined ? {} : value;
    return;
  }
  const keys = path.replace(/^\//, "").split("/").map((k) => k.replace(/~1/g, "/").replace(/~0/g, "~"));
  let at = model;
  for (const key of keys.slice(0, -1)) {
    if (at[key] === null || typeof at[key] !== "object") at[key] = {};
    at = at[key];
  }
  const last = keys[keys.length - 1];
  if (value === undefined) delete at[last];
  else at[last] = value;
}

function resolve(value, scope) {
  if (value !== null && typeof value === "object" && typeof value["@path"] === "string") {
    const path = value["@path"];
    return path.startsWith("/") ? pointer(model, path) : pointer(scope, "/" + path);
  }
  return value;
}

function text(value, scope) {
  const v = resolve(value, scope);
  return v === undefined || v === null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
}

function childrenOf(def, scope) {
  const spec = def.children;
  if (Array.isArray(spec)) return spec.map((id) => draw(id, scope));
  if (spec && typeof spec === "object") {
    const items = resolve({ "@path": spec.path }, scope);
    return Array.isArray(items) ? items.map((each) => draw(spec.componentId, each)) : [];
  }
  return [];
}

function draw(id, scope) {
  const def = components[id];
  let el;
  if (!def) {
    el = document.createElement("span");
    el.textContent = "[missing " + id + "]";
    return el;
  }
  switch (def.component) {
    case "Text":
      el = document.createElement("span");
      el.textContent = text(def.text, scope);
      break;
    case "Column":
    case "Row":
      el = document.createElement("div");
      el.className = def.component === "Row" ? "a2-row" : "a2-column";
      el.append(...childrenOf(def, scope));
      break;
    case "List":
      el = document.createElement("ul");
      el.className = "a2-list";
      for (const child of childrenOf(def, scope)) {
        const li = document.createElement("li");
        li.append(child);
        el.append(li);
      }
      break;
    case "Badge":
      el = document.createElement("span");
      el.className = "a2-badge";
      el.textContent = text(def.text, scope);
      break;
    case "Button":
      el = document.createElement("button");
      el.className = "a2-button";
      if (def.child) el.append(draw(def.child, scope));
      el.addEventListener("click", () => act(id, def, scope));
      break;
    default:
      el = document.createElement("span");
      el.textContent = "[" + def.component + " is not in this renderer's catalog]";
  }
  el.dataset.componentId = id;
  return el;
}

function renderOwn() {
  const root = $("surface");
  if (shown && components.root) root.replaceChildren(draw("root", model));
}

// @a2ui/lit: its message processor with the basic catalog; its actions go up on the session.
function litProcessor() {
  const p = new A2uiLit.MessageProcessor([A2uiLit.basicCatalog], (action) =>
    post(session, { version: "v0.9", action }));
  p.onSurfaceCreated((surface) => {
    const element = document.createElement("a2ui-surface");
    element.surface = surface;
    $("surface").replaceChildren(element);
  });
  return p;
}

function capabilities() {
  if (rendererKind === "lit") return litProcessor().getClientCapabilities();
  return { "v1.0": { supportedCatalogIds: [
    "https://a2ui.org/specification/v1_0/catalogs/basic/catalog.json", "urn:loom:a2ui:catalog:loom:v1"] } };
}

async function post(to, message) {
  item("wire", "\u2191 " + JSON.stringify(message), "up");
  if (offline) {
    problem("not sent: the connection to the server is lost");
    return;
  }
  try {
    const response = await fetch(api + "/messages?session=" + to, {
      method: "POST",
      headers: { Authorization: "Bearer " + bearer, "Content-Type": "application/json" },
      body: JSON.stringify(message),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) problem("refused: " + (answer.error || response.status));
  } catch (error) {
    lost();
  }
}

function act(id, def, scope) {
  const event = (def.action && def.action.event) || {};
  const context = {};
  for (const [key, value] of Object.entries(event.context || {})) context[key] = resolve(value, scope);
  post(session, { version: "v1.0", action: {
    name: event.name, surfaceId: wireSurfaceId, sourceComponentId: id, timestamp: new Date().toISOString(), context,
  } });
}

// The functions this page implements (the shop's catalog), deduplicated by call id.
function answer(call, to) {
  const id = call.functionCallId;
  if (!answered.has(id)) {
    const fn = call.callFunction || {};
    const name = fn["@call"] || fn.name;
    let reply;
    if (name === "getLocale") reply = { functionCallId: id, value: navigator.language || "en-US" };
    else if (name === "submitOrder") {
      reply = { functionCallId: id, value: { confirmation: "PG-" + ((fn.args || {}).orderId || "?"), placed: true } };
    } else reply = { functionCallId: id, error: { code: "FUNCTION_NOT_FOUND", message: "no function " + name + " here" } };
    answered.set(id, reply);
  }
  post(to, { version: "v1.0", rendererFunctionResponse: answered.get(id) });
}

// Draws one agent-to-renderer message with the chosen renderer. `deleteSurface` is shown in the
// wire but not drawn: the pane keeps the surface as last drawn, beside the result.
function drawMessage(message) {
  if (message.createSurface) wireSurfaceId = message.createSurface.surfaceId;
  if (message.deleteSurface) {
    deleted = true;
    return;
  }
  if (rendererKind === "lit") {
    if (message.createSurface) processor = litProcessor();
    if (processor) processor.processMessages([message]);
    shown = shown || !!message.createSurface;
    return;
  }
  if (message.createSurface) {
    const m = message.createSurface;
    components = {};
    for (const c of m.components || []) components[c.id] = c;
    model = m.dataModel || {};
    shown = true;
  } else if (message.updateComponents) {
    for (const c of message.updateComponents.components || []) components[c.id] = c;
  } else if (message.updateDataModel) {
    const u = message.updateDataModel;
    setPointer(u.path, "value" in u && u.value !== null ? u.value : undefined);
  }
  renderOwn();
}

function onWire(data) {
  const message = data.message;
  window.loomPlayground.received.push(data);
  item("wire", "\u2193 #" + data.session + " " + JSON.stringify(message));
  if (message.callRendererFunction) {
    answer(message.callRendererFunction, data.session);
    return;
  }
  drawMessage(message);
}

// The execution ended: its result, and the surface as last drawn (drawn from the server's
// frames when this page saw none, after a reload).
function onFinal(data) {
  ended = true;
  interactive();
  const result = $("result");
  result.hidden = false;
  result.className = data.status === "completed" ? "" : "failed";
  const output = data.output || {};
  const confirmation = output.receipt && output.receipt.confirmation;
  const lines = ["Execution " + execution + " " + data.status + "."];
  if (output.status === "placed") lines.push("Order placed, confirmation " + (confirmation || "-") + ".");
  else if (output.status === "expired") lines.push("Nobody approved in time: the order expired.");
  if (data.error) lines.push("Error: " + data.error);
  result.replaceChildren(...lines.map((line) => Object.assign(document.createElement("div"), { textContent: line })));
  const pre = document.createElement("pre");
  pre.textContent = "output " + JSON.stringify(data.output, null, 2);
  result.append(pre);
  if (!shown) for (const frame of data.frames || []) drawMessage(frame);
  const note = document.createElement("p");
  note.className = "a2-final";
  note.textContent = "the final surface, as last drawn" + (deleted ? " (the flow has deleted it)" : "");
  $("surface").prepend(note);
  listExecutions();
  settle();
}

// The stream is closed once the execution has ended and its result is shown.
function settle() {
  if (source && ended) source.close();
}

function lost() {
  if (ended) return;
  offline = true;
  $("offline").hidden = false;
  interactive();
}

async function listExecutions() {
  const select = $("executions");
  try {
    const response = await fetch("../admin/v1/executions?flow=checkout", { headers: { Authorization: "Bearer " + token } });
    if (!response.ok) return;
    const listed = (await response.json()).executions || [];
    const options = listed.map((e) => {
      const option = document.createElement("option");
      option.value = e.id;
      option.textContent = e.id + " (" + e.status + ")";
      return option;
    });
    if (execution && !listed.some((e) => e.id === execution)) {
      const option = document.createElement("option");
      option.value = execution;
      option.textContent = execution + " (unknown)";
      options.unshift(option);
    }
    select.replaceChildren(...options);
    select.value = execution;
  } catch (error) {
    lost();
  }
}

function go(next) {
  const hash = new URLSearchParams({ execution: next.execution ?? execution, renderer: next.renderer ?? rendererKind });
  if (credential) hash.set("credential", credential);
  if (surfaceId !== "checkout") hash.set("surface", surfaceId);
  location.hash = hash.toString();
  location.reload();
}

async function newCheckout() {
  const button = $("new-checkout");
  button.disabled = true;
  try {
    const response = await fetch("v1/executions", { method: "POST", headers: { Authorization: "Bearer " + token } });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) {
      problem("could not start a checkout: " + (answer.error || response.status));
      button.disabled = false;
      return;
    }
    go({ execution: answer.execution });
  } catch (error) {
    lost();
    button.disabled = false;
  }
}

function start() {
  $("surface-id").textContent = surfaceId;
  $("renderer").value = rendererKind;
  $("drawn-by").textContent = rendererKind === "lit" ? "by @a2ui/lit " + A2uiLit.version + " (A2UI v0.9)" : "by the page's own renderer (A2UI v1.0)";
  $("renderer").addEventListener("change", (e) => go({ renderer: e.target.value }));
  $("executions").addEventListener("change", (e) => go({ execution: e.target.value }));
  $("new-checkout").addEventListener("click", newCheckout);
  if (!token && !credential) {
    problem("open the link the server printed: /playground/#token=...");
    return;
  }
  if (token) {
    // The console opens on this execution, with the token in the fragment (never sent).
    $("console-link").href = "../admin/#" + new URLSearchParams({ token, execution }).toString();
    listExecutions();
  } else {
    // A renderer's view: no log, no model, no other executions.
    for (const el of document.querySelectorAll(".operator-only")) el.hidden = true;
  }
  if (!execution) {
    problem("pick an execution above, or start a new checkout");
    return;
  }
  const who = token ? "token=" + encodeURIComponent(token) : "credential=" + encodeURIComponent(credential);
  const query = "?" + who + "&capabilities=" + encodeURIComponent(JSON.stringify(capabilities()));
  source = new EventSource(api + "/stream" + query);
  source.addEventListener("session", (e) => {
    const data = JSON.parse(e.data);
    session = data.session;
    functionsSession = data.functions || data.session;
    $("session").textContent = "#" + session + (data.functions ? " + #" + data.functions + " (functions, v1.0)" : "") + " " + data.protocol;
    // A new session after a lost connection: start over from what it sends.
    for (const list of ["wire", "patches", "events", "not-sent"]) $(list).replaceChildren();
    components = {};
    model = {};
    shown = false;
    deleted = false;
    processor = null;
    $("surface").replaceChildren();
    offline = false;
    $("offline").hidden = true;
    problem("");
    interactive();
  });
  source.addEventListener("wire", (e) => onWire(JSON.parse(e.data)));
  source.addEventListener("not-sent", (e) => item("not-sent", JSON.parse(e.data)));
  source.addEventListener("model", (e) => {
    $("model").textContent = JSON.stringify(JSON.parse(e.data), null, 2);
  });
  source.addEventListener("event", (e) => {
    const data = JSON.parse(e.data);
    item("events", data.seq + " " + data.type);
    $("last-event").textContent = data.type;
    if (data.type === "SURFACE_PATCH") item("patches", data.seq + " " + JSON.stringify(data.event));
  });
  source.addEventListener("final", (e) => onFinal(JSON.parse(e.data)));
  source.addEventListener("failure", (e) => {
    const data = JSON.parse(e.data);
    source.close();
    const note = document.createElement("p");
    note.className = "a2-final";
    note.textContent = data.kind === "unknown-execution"
      ? "No execution " + execution + " on this server. Pick one above, or start a new checkout."
      : "The session was refused: " + data.message;
    $("surface").replaceChildren(note);
    problem(data.message);
  });
  source.onerror = () => {
    if (ended) return;
    if (source.readyState === EventSource.CLOSED) problem(token ? "the stream closed (wrong token?)" : "the stream closed (an expired or wrong renderer link?)");
    lost();
  };
}

// For tests and people: the element drawing a component, through the renderers' shadow roots.
function deepQueryAll(root, selector, found = []) {
  for (const el of root.querySelectorAll("*")) {
    if (el.matches(selector)) found.push(el);
    if (el.shadowRoot) deepQueryAll(el.shadowRoot, selector, found);
  }
  return found;
}

function deepText(root) {
  let text = "";
  for (const node of root.childNodes) {
    if (node.nodeType === Node.TEXT_NODE) text += node.textContent;
    else if (node.nodeType === Node.ELEMENT_NODE) {
      if (node.tagName === "STYLE" || node.tagName === "SCRIPT") continue;
      text += " " + deepText(node.shadowRoot || node) + " ";
    }
  }
  return text.replace(/\s+/g, " ");
}

window.loomPlayground = {
  renderer: rendererKind,
  received: [],
  textOf: (el) => deepText(el.shadowRoot || el),
  buttons: () => deepQueryAll($("surface"), "button"),
  surfaceText: () => deepText($("surface")),
};

start();

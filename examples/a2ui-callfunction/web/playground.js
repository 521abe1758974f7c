// The A2UI playground: one execution's surface as the A2UI wire carries it (SSE down, POST
// up), its native model and SURFACE_PATCH stream beside it, and a small renderer of the
// default catalog (Text, Column, Row, List, Button, Badge) drawing the surface from the wire.
"use strict";

const params = new URLSearchParams(location.hash.slice(1));
if (params.get("token")) sessionStorage.setItem("loom-token", params.get("token"));
const token = sessionStorage.getItem("loom-token") || "";
const execution = params.get("execution") || "";
const surfaceId = params.get("surface") || "checkout";
const api = "v1/" + encodeURIComponent(execution) + "/" + encodeURIComponent(surfaceId);
// The id the server names this execution's surface by on the wire, from its createSurface.
let wireSurfaceId = surfaceId;
const $ = (id) => document.getElementById(id);

let session = 0;
let components = {};
let model = {};
let shown = false;
let deleted = false;
let ended = false;
let source = null;
const answered = new Map();

function problem(text) {
  $("problem").hidden = false;
  $("problem").textContent = text;
}

function item(list, text, cls) {
  const li = document.createElement("li");
  li.textContent = text;
  if (cls) li.className = cls;
  $(list).append(li);
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

function render() {
  const root = $("surface");
  if (deleted) {
    const note = document.createElement("p");
    note.className = "a2-deleted";
    note.textContent = "the agent deleted the surface";
    root.replaceChildren(note);
  } else if (shown && components.root) {
    root.replaceChildren(draw("root", model));
  }
}

async function post(message) {
  item("wire", "\u2191 " + JSON.stringify(message), "up");
  const response = await fetch(api + "/messages?session=" + session, {
    method: "POST",
    headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
    body: JSON.stringify(message),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) problem("refused: " + (answer.error || response.status));
}

function act(id, def, scope) {
  const event = (def.action && def.action.event) || {};
  const context = {};
  for (const [key, value] of Object.entries(event.context || {})) context[key] = resolve(value, scope);
  post({ version: "v1.0", action: {
    name: event.name, surfaceId: wireSurfaceId, sourceComponentId: id, timestamp: new Date().toISOString(), context,
  } });
}

// The functions this demo renderer implements (the shop's catalog).
function answer(call) {
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
  post({ version: "v1.0", rendererFunctionResponse: answered.get(id) });
}

function onWire(message) {
  item("wire", "\u2193 " + JSON.stringify(message));
  if (message.createSurface) {
    const m = message.createSurface;
    wireSurfaceId = m.surfaceId;
    components = {};
    for (const c of m.components || []) components[c.id] = c;
    model = m.dataModel || {};
    shown = true;
    deleted = false;
  } else if (message.updateComponents) {
    for (const c of message.updateComponents.components || []) components[c.id] = c;
  } else if (message.updateDataModel) {
    setPointer(message.updateDataModel.path, message.updateDataModel.value);
  } else if (message.deleteSurface) {
    deleted = true;
  } else if (message.callRendererFunction) {
    answer(message.callRendererFunction);
  }
  render();
  settle();
}

// The stream is closed once the execution has ended and the surface is gone (or never was):
// the two arrive on different paths, in either order.
function settle() {
  if (source && ended && (deleted || !shown)) source.close();
}

function start() {
  $("execution").textContent = execution || "-";
  $("surface-id").textContent = surfaceId;
  if (!token || !execution) {
    problem("open the link the server printed: /playground/#token=...&execution=...");
    return;
  }
  source = new EventSource(api + "/stream?token=" + encodeURIComponent(token));
  source.addEventListener("session", (e) => {
    session = JSON.parse(e.data).session;
    $("session").textContent = "#" + session;
    for (const list of ["wire", "patches", "events"]) $(list).replaceChildren();
  });
  source.addEventListener("wire", (e) => onWire(JSON.parse(e.data)));
  source.addEventListener("model", (e) => {
    $("model").textContent = JSON.stringify(JSON.parse(e.data), null, 2);
  });
  source.addEventListener("event", (e) => {
    const data = JSON.parse(e.data);
    item("events", data.seq + " " + data.type);
    $("last-event").textContent = data.type;
    if (data.type === "SURFACE_PATCH") item("patches", data.seq + " " + JSON.stringify(data.event));
    if (/^EXECUTION_(COMPLETED|FAILED|CANCELLED)$/.test(data.type)) {
      ended = true;
      settle();
    }
  });
  source.addEventListener("failure", (e) => problem(JSON.parse(e.data)));
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) problem("the stream closed (wrong token?)");
  };
}

start();

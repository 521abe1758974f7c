// The Loom web console: lists executions and steps in doubt from the admin API, shows one
// execution (what happened: its outcome, its steps and gates on a timeline, its log, live), and
// sends verdicts, resumes and cancels, each through a dialog of the page's own. Every value from
// the server is put in the page as text (textContent), never as markup. The token stays in this
// tab's sessionStorage and goes out only in the Authorization header of the API's requests.
"use strict";

const API = new URL("v1/", document.baseURI.endsWith("/") ? document.baseURI : document.baseURI + "/");
const OPERATOR = "web console";
let token = sessionStorage.getItem("loom-admin-token") || "";
let selected = null;
let selectedFrom = 0;
let selectedEvents = [];
let follow = 0;
let openStep = null;
// The steps in doubt shown: the first DOUBTS_PAGE, more on demand; the queue may be folded.
const DOUBTS_PAGE = 5;
let doubtsShown = DOUBTS_PAGE;
// The executions page: `before` cursors of the pages shown so far (empty: the newest).
let cursors = [];
let nextBefore = null;
let flowTimer = 0;
// Which listing is the latest: counts that arrive for an older one are dropped.
let listing = 0;

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function say(message) {
  $("status").textContent = message || "";
  $("status").hidden = !message;
}

async function api(method, path, body) {
  const response = await fetch(new URL(path, API), {
    method,
    headers: Object.assign(
      { Authorization: "Bearer " + token, Accept: "application/json" },
      body === undefined ? {} : { "Content-Type": "application/json" }
    ),
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    const message = answer && answer.error ? answer.error.message : "HTTP " + response.status;
    const error = new Error(message);
    error.status = response.status;
    error.expected = answer && answer.error ? answer.error.expected : undefined;
    // A payload or input that does not fit its schema: each wrong field, in words.
    error.violations = answer && answer.error ? answer.error.violations || [] : [];
    throw error;
  }
  return answer;
}

function path(id, rest) {
  return "executions/" + encodeURIComponent(id) + (rest || "");
}

// ---------------------------------------------------------------- formatting

function utc(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "-";
}

function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 1000) return ms + "ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return (ms / 1000).toFixed(s < 10 ? 1 : 0) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d" + String(Math.floor((s % 86400) / 3600)).padStart(2, "0") + "h";
}

function ago(ms) {
  return ms ? duration(Math.max(0, Date.now() - ms)) + " ago" : "-";
}

function badge(status) {
  return el("span", "badge status-" + status, status);
}

function cell(row, content, className) {
  const td = row.insertCell();
  if (content instanceof Node) td.appendChild(content);
  else td.textContent = content === undefined || content === null ? "-" : String(content);
  if (className) td.className = className;
  return td;
}

// Payloads the operator opened, by a key naming where they are: they stay open when the page
// is drawn again.
const expanded = new Set();

// A payload (masked by the server, K10-R6) on one line, the whole of it on demand.
function payload(value, key) {
  const details = el("details", "payload");
  if (key) {
    details.open = expanded.has(key);
    details.addEventListener("toggle", () => (details.open ? expanded.add(key) : expanded.delete(key)));
  }
  const text = JSON.stringify(value);
  details.appendChild(el("summary", null, text === undefined ? "null" : text));
  details.appendChild(el("pre", null, JSON.stringify(value, null, 2)));
  return details;
}

function linkTo(id, label) {
  const link = el("button", "link", label || id);
  link.type = "button";
  link.addEventListener("click", () => select(id));
  return link;
}

// ---------------------------------------------------------------- dialogs

// Opens the page's dialog: `build(body)` fills it and returns a function that reads what the
// operator entered (throwing an Error to say what is wrong). With `action`, the dialog stays
// open until the action succeeds, showing its errors. Resolves to the value read, or null when
// the operator backs out.
function ask({ title, build, confirm, danger, action }) {
  return new Promise((resolve) => {
    const dialog = $("dialog");
    const form = $("dialog-form");
    const ok = $("dialog-confirm");
    const back = $("dialog-cancel");
    const error = $("dialog-error");
    $("dialog-title").textContent = title;
    const body = $("dialog-body");
    body.replaceChildren();
    error.hidden = true;
    const read = (build && build(body)) || (() => true);
    ok.textContent = confirm || "Confirm";
    ok.className = danger ? "danger" : "primary";
    ok.disabled = false;
    let settled = false;
    const finish = (value) => {
      if (settled) return;
      settled = true;
      form.removeEventListener("submit", onSubmit);
      back.removeEventListener("click", onBack);
      dialog.removeEventListener("cancel", onBack);
      if (dialog.open) dialog.close();
      resolve(value);
    };
    const fail = (e) => {
      showRefusal(error, e);
      error.hidden = false;
    };
    const onSubmit = async (event) => {
      event.preventDefault();
      error.hidden = true;
      let value;
      try {
        value = read();
      } catch (e) {
        return fail(e);
      }
      if (!action) return finish(value);
      ok.disabled = true;
      try {
        await action(value);
        finish(value);
      } catch (e) {
        fail(e);
        ok.disabled = false;
      }
    };
    const onBack = (event) => {
      event.preventDefault();
      finish(null);
    };
    form.addEventListener("submit", onSubmit);
    back.addEventListener("click", onBack);
    dialog.addEventListener("cancel", onBack);
    dialog.showModal();
    const first = body.querySelector("input, select, textarea");
    (first || ok).focus();
  });
}

// A refusal in a dialog: for a payload that does not fit its schema, which field is wrong and
// what fits there, in words; else the server's message.
function showRefusal(box, e) {
  box.replaceChildren();
  if (!e.violations || !e.violations.length) {
    box.textContent = e.message;
    return;
  }
  box.appendChild(el("p", null, "Not sent: it does not fit what is expected. Nothing was recorded."));
  const list = el("ul", "violations");
  for (const v of e.violations) {
    const item = el("li");
    const where = v.field === "/" ? "the whole value" : v.field;
    item.append(el("code", null, where), ": " + v.problem + ". Expected " + v.expected + ".");
    list.appendChild(item);
  }
  box.appendChild(list);
}

function field(labelText, control, help) {
  const wrap = el("label", "field");
  wrap.appendChild(el("span", null, labelText));
  wrap.appendChild(control);
  if (help) wrap.appendChild(el("span", "help", help));
  return wrap;
}

function readJson(text, what) {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(what + " is not JSON: " + error.message);
  }
}

// ---------------------------------------------------------------- forms from JSON Schemas

// A shallow merge of schemas: properties and required lists united, other keywords laid over.
function merge(base, over) {
  const out = Object.assign({}, base);
  for (const key of ["oneOf", "anyOf", "allOf"]) delete out[key];
  for (const [key, value] of Object.entries(over || {})) {
    if (key === "properties") out.properties = Object.assign({}, out.properties, value);
    else if (key === "required") out.required = Array.from(new Set([...(out.required || []), ...value]));
    else out[key] = value;
  }
  return out;
}

function typeOf(schema) {
  const type = schema.type;
  if (Array.isArray(type)) return type.find((t) => t !== "null") || "null";
  if (type) return type;
  if (schema.properties) return "object";
  return undefined;
}

function branchName(branch, index) {
  if (branch.title) return branch.title;
  if (branch.required && branch.required.length) return branch.required.join(", ");
  return "option " + (index + 1);
}

// Builds the controls for `schema` into `parent`; returns a function that reads the value.
// What a form cannot express well (arrays, a schema that allows anything) is a JSON field.
function formFor(schema, parent, name, depth) {
  schema = schema && typeof schema === "object" ? schema : {};
  if (depth > 8) return jsonField(parent, name, schema);
  if (Array.isArray(schema.allOf)) {
    return formFor(schema.allOf.reduce(merge, merge(schema, {})), parent, name, depth + 1);
  }
  const branches = schema.oneOf || schema.anyOf;
  if (Array.isArray(branches) && branches.length) {
    const box = el("fieldset");
    box.appendChild(el("legend", null, name || schema.title || "one of"));
    const choice = el("div", "choice");
    const holder = el("div", "form");
    let read = () => undefined;
    const group = "choice-" + Math.random().toString(36).slice(2);
    branches.forEach((branch, index) => {
      const label = el("label");
      const radio = el("input");
      radio.type = "radio";
      radio.name = group;
      radio.value = String(index);
      radio.checked = index === 0;
      radio.addEventListener("change", () => show(index));
      label.append(radio, branchName(branch, index));
      choice.appendChild(label);
    });
    const show = (index) => {
      holder.replaceChildren();
      read = formFor(merge(schema, branches[index]), holder, null, depth + 1);
    };
    box.append(choice, holder);
    parent.appendChild(box);
    show(0);
    return () => read();
  }
  if (Object.prototype.hasOwnProperty.call(schema, "const")) {
    parent.appendChild(field(name || "value", el("code", null, JSON.stringify(schema.const))));
    return () => schema.const;
  }
  if (Array.isArray(schema.enum)) {
    const select = el("select");
    for (const value of schema.enum) select.appendChild(el("option", null, JSON.stringify(value)));
    parent.appendChild(field(name || "value", select, schema.description));
    return () => schema.enum[select.selectedIndex];
  }
  const type = typeOf(schema);
  if (type === "object") {
    const box = el("fieldset");
    if (name) box.appendChild(el("legend", null, name));
    const required = new Set(schema.required || []);
    const properties = Object.entries(schema.properties || {});
    const readers = [];
    const optional = el("details");
    optional.appendChild(el("summary", "hint", "Optional fields"));
    for (const [key, property] of properties) {
      const target = required.has(key) ? box : optional;
      readers.push([key, required.has(key), formFor(property, target, key, depth + 1)]);
    }
    if (optional.children.length > 1) box.appendChild(optional);
    parent.appendChild(box);
    return () => {
      const value = {};
      for (const [key, needed, read] of readers) {
        const got = read();
        if (got === undefined && needed) throw new Error("'" + key + "' is required");
        if (got !== undefined) value[key] = got;
      }
      return value;
    };
  }
  if (type === "string") {
    const input = el("input");
    input.type = "text";
    input.name = name || "value";
    if (schema.minLength) input.minLength = schema.minLength;
    if (schema.maxLength) input.maxLength = schema.maxLength;
    const limits = schema.minLength ? "at least " + schema.minLength + " characters" : "";
    parent.appendChild(field(name || "value", input, [schema.description, limits].filter(Boolean).join("; ")));
    return () => (input.value === "" ? undefined : input.value);
  }
  if (type === "number" || type === "integer") {
    const input = el("input");
    input.type = "number";
    input.name = name || "value";
    if (type === "integer") input.step = "1";
    parent.appendChild(field(name || "value", input, schema.description));
    return () => {
      if (input.value === "") return undefined;
      const number = Number(input.value);
      if (!Number.isFinite(number)) throw new Error("'" + (name || "value") + "' is not a number");
      return number;
    };
  }
  if (type === "boolean") {
    const input = el("input");
    input.type = "checkbox";
    input.name = name || "value";
    const wrap = el("label", "choice");
    wrap.append(input, name || "yes");
    parent.appendChild(wrap);
    return () => input.checked;
  }
  if (type === "null") {
    parent.appendChild(field(name || "value", el("code", null, "null")));
    return () => null;
  }
  return jsonField(parent, name, schema);
}

function jsonField(parent, name, schema) {
  const area = el("textarea");
  area.name = name || "json";
  area.spellcheck = false;
  parent.appendChild(field((name || "value") + " (JSON)", area, schema && schema.description));
  return () => (area.value.trim() === "" ? undefined : readJson(area.value, "'" + (name || "value") + "'"));
}

// The resume dialog's body: a form made from the gate's schema (when it declared one) or JSON
// to type, and a switch between the two.
function resumeBody(gate, initialJson, what) {
  const noun = what || "Payload";
  return (body) => {
    const expects = gate.expects;
    if (gate.request !== undefined) {
      body.appendChild(field("The flow asks", payload(gate.request)));
    }
    const mode = el("div", "mode");
    const asForm = el("button", null, "Form");
    const asJson = el("button", null, "JSON");
    asForm.type = asJson.type = "button";
    const holder = el("div", "form");
    let read = () => undefined;
    const useForm = () => {
      asForm.setAttribute("aria-pressed", "true");
      asJson.setAttribute("aria-pressed", "false");
      holder.replaceChildren();
      const fields = formFor(expects.schema, holder, null, 0);
      read = () => {
        const value = fields();
        if (value === undefined) throw new Error("fill in the form");
        return value;
      };
    };
    const useJson = (text) => {
      asForm.setAttribute("aria-pressed", "false");
      asJson.setAttribute("aria-pressed", "true");
      holder.replaceChildren();
      const area = el("textarea");
      area.name = "payload";
      area.spellcheck = false;
      area.value = text;
      const help = expects ? "It must fit the schema below." : what ? "The flow declares no input schema: send what it expects." : "The gate declared no shape: send what the flow expects.";
      holder.appendChild(field(noun + " (JSON)", area, help));
      read = () => readJson(area.value, "the " + noun.toLowerCase());
    };
    if (expects) {
      asForm.addEventListener("click", useForm);
      asJson.addEventListener("click", () => {
        let text = JSON.stringify(expects.example, null, 2);
        try {
          text = JSON.stringify(read(), null, 2);
        } catch (_) {
          /* the form is incomplete: start from the example */
        }
        useJson(text);
      });
      mode.append(asForm, asJson);
      body.appendChild(mode);
    }
    body.appendChild(holder);
    if (expects) {
      const schema = el("details", "payload");
      schema.appendChild(el("summary", null, "Expected: " + (expects.schema.title || "JSON Schema")));
      schema.appendChild(el("pre", null, JSON.stringify(expects.schema, null, 2)));
      body.appendChild(schema);
    }
    if (initialJson !== undefined || !expects) useJson(initialJson !== undefined ? initialJson : "");
    else useForm();
    return () => read();
  };
}

async function resumeGate(execution, gate) {
  let draft;
  for (;;) {
    const value = await ask({
      title: "Resume " + gate.eventType + " (" + gate.correlationKey + ")",
      build: resumeBody(gate, draft),
      confirm: "Review",
    });
    if (value === null) return;
    draft = JSON.stringify(value, null, 2);
    const sent = await ask({
      title: "Resume gate " + gate.gateId + " of " + execution + "?",
      build: (body) => {
        body.appendChild(el("p", null, "The flow goes on with this payload. A resume cannot be taken back."));
        body.appendChild(el("pre", "preview", JSON.stringify(value, null, 2)));
      },
      confirm: "Resume",
      action: () =>
        api("POST", path(execution, "/resume"), {
          eventType: gate.eventType,
          correlationKey: gate.correlationKey,
          payload: value,
          operator: OPERATOR,
        }),
    });
    if (sent !== null) {
      say("");
      await refresh();
      return;
    }
  }
}

// ---------------------------------------------------------------- verdicts

async function resolve(doubt, verdict) {
  await api("POST", path(doubt.execution, "/resolve"), { stepId: doubt.stepId, verdict, operator: OPERATOR });
}

function doubtFacts(doubt) {
  return (body) => {
    const facts = el("dl", "facts");
    for (const [name, value] of [
      ["step", doubt.stepId + " (" + doubt.effect + ", attempt " + doubt.attempt + ")"],
      ["idempotency key", doubt.idempotencyKey],
      ["waiting", duration(doubt.waitingMs)],
    ]) {
      facts.append(el("dt", null, name), el("dd", null, value));
    }
    body.appendChild(facts);
  };
}

async function verdictCompleted(doubt) {
  await ask({
    title: "It happened: complete " + doubt.stepId,
    build: (body) => {
      doubtFacts(doubt)(body);
      const area = el("textarea");
      area.name = "output";
      area.spellcheck = false;
      body.appendChild(field("Output the flow gets from the step (JSON)", area, "What the receiver says the effect returned."));
      return () => readJson(area.value.trim() === "" ? "null" : area.value, "the output");
    },
    confirm: "Record: completed",
    action: (output) => resolve(doubt, { kind: "completed", output }),
  });
}

async function verdictFailed(doubt) {
  await ask({
    title: "It did not happen: fail " + doubt.stepId,
    build: (body) => {
      doubtFacts(doubt)(body);
      const message = el("input");
      message.name = "message";
      message.required = true;
      const code = el("input");
      code.name = "code";
      code.value = "loom.operator_verdict";
      body.append(field("Why it failed", message), field("Error code", code));
      return () => {
        if (!message.value.trim()) throw new Error("say why the step failed");
        return { code: code.value.trim() || "loom.operator_verdict", message: message.value };
      };
    },
    confirm: "Record: failed",
    danger: true,
    action: (error) => resolve(doubt, { kind: "failed", error }),
  });
}

async function verdictRetry(doubt) {
  await ask({
    title: "Run " + doubt.effect + " again?",
    build: (body) => {
      doubtFacts(doubt)(body);
      body.appendChild(el("p", null, "The effect runs again with the same idempotency key: only a receiver that deduplicates on it makes this safe."));
    },
    confirm: "Retry",
    danger: true,
    action: () => resolve(doubt, { kind: "retry" }),
  });
}

async function cancelSelected() {
  if (!selected) return;
  const id = selected;
  await ask({
    title: "Cancel execution " + id + "?",
    build: (body) => {
      body.appendChild(el("p", null, "The flow stops for good; its log is closed."));
      const reason = el("input");
      reason.name = "reason";
      reason.value = "cancelled from the web console";
      body.appendChild(field("Reason", reason));
      return () => reason.value;
    },
    confirm: "Cancel execution",
    danger: true,
    action: (reason) => api("POST", path(id, "/cancel"), { reason }),
  });
  await refresh();
}

// How a step in doubt's execution ended, if it has: its log then takes no verdict.
function endedWord(doubt) {
  return doubt.cancelled ? "cancelled" : "ended";
}

// The verdicts on a step in doubt, the same in the queue and in the execution's detail.
function verdictActions(doubt) {
  const actions = el("div", "actions");
  if (doubt.ended || doubt.cancelled) {
    // Its log is closed: no verdict can be recorded, but the effect may have happened.
    actions.appendChild(el("span", "meta", endedWord(doubt) + ": settle it with the receiver"));
  } else {
    actionButton(actions, "Completed…", () => verdictCompleted(doubt));
    actionButton(actions, "Failed…", () => verdictFailed(doubt));
    actionButton(actions, "Retry…", () => verdictRetry(doubt));
  }
  return actions;
}

// ---------------------------------------------------------------- starting, cancelling many

// Starts an execution of a flow the server runs: the input from a form made from the flow's
// input schema (JSON when it declares none, or on demand); the server checks it again.
async function startExecution() {
  const flows = await api("GET", "flows");
  if (!flows.length) throw new Error("The server runs no flow.");
  // The newest version of each flow: what a start without a version runs.
  const newest = new Map();
  for (const flow of flows) {
    if (!newest.has(flow.name) || newest.get(flow.name).version < flow.version) newest.set(flow.name, flow);
  }
  const started = await ask({
    title: "Start an execution",
    build: (body) => {
      const choice = el("select");
      choice.name = "flow";
      for (const name of newest.keys()) choice.appendChild(el("option", null, name));
      const id = el("input");
      id.name = "id";
      id.placeholder = "made up by the server";
      id.autocomplete = "off";
      id.spellcheck = false;
      body.append(field("Flow", choice), field("Execution id (optional)", id, "Starting the same id with the same input again starts nothing new."));
      const holder = el("div", "form");
      body.appendChild(holder);
      let read = () => undefined;
      const draw = () => {
        holder.replaceChildren();
        const flow = newest.get(choice.value);
        const gate = { expects: flow.inputSchema ? { schema: flow.inputSchema, example: flow.example } : undefined };
        read = resumeBody(gate, undefined, "Input")(holder);
      };
      choice.addEventListener("change", draw);
      draw();
      return () => ({ flow: choice.value, id: id.value.trim() || undefined, input: read() });
    },
    confirm: "Start",
    action: async (value) => {
      const answer = await api("POST", "executions", value);
      value.execution = answer.execution;
    },
  });
  if (started === null) return;
  say("");
  await refresh();
  await select(started.execution);
}

// What the list shows, as a cancel by filter takes it.
function listFilter() {
  const filter = {};
  if ($("filter").value) filter.status = $("filter").value;
  if ($("flow").value.trim()) filter.flow = $("flow").value.trim();
  if ($("search").value.trim()) filter.idPrefix = $("search").value.trim();
  if ($("since").value) filter.startedFromMs = Date.now() - Number($("since").value);
  return filter;
}

// Cancels every execution not ended that the list's filter matches, after a count: the
// dialog says how many, and the server refuses if that is no longer true when confirmed.
async function cancelMatching() {
  const filter = listFilter();
  const everything = Object.keys(filter).length === 0;
  const counted = await api("POST", "cancel-many", Object.assign({ dryRun: true, all: everything }, filter));
  if (counted.matched === 0) {
    say("No execution that has not ended matches the filter: nothing to cancel.");
    return;
  }
  const words = Object.entries(filter).map(([key, value]) => key + " " + (key === "startedFromMs" ? "since " + utc(value) : value));
  const many = counted.matched + (counted.more ? "+" : "") + " execution" + (counted.matched === 1 ? "" : "s");
  await ask({
    title: "Cancel " + many + "?",
    build: (body) => {
      body.appendChild(el("p", null, (everything ? "No filter is set: every execution that has not ended" : "Every execution not ended with " + words.join(", ")) + ". Each stops for good; its log is closed."));
      const list = el("div", "matched", counted.executions.slice(0, 50).join("\n") + (counted.executions.length > 50 ? "\n…" : ""));
      list.id = "cancel-many-list";
      body.appendChild(list);
      if (counted.more) body.appendChild(el("p", "hint", "More match than one request cancels: run it again afterwards."));
      const reason = el("input");
      reason.name = "reason";
      reason.value = "cancelled by filter from the web console";
      body.appendChild(field("Reason", reason));
      return () => reason.value;
    },
    confirm: "Cancel " + many,
    danger: true,
    action: async (reason) => {
      const done = await api("POST", "cancel-many", Object.assign({ all: everything, expect: counted.more ? undefined : counted.matched, limit: counted.more ? counted.matched : undefined, reason }, filter));
      say(done.skipped.length ? done.skipped.length + " not cancelled: " + done.skipped.map((s) => s.execution + " (" + s.reason + ")").join("; ") : "");
    },
  });
  await refresh();
}

function actionButton(parent, label, action, className) {
  const b = el("button", className, label);
  b.type = "button";
  b.addEventListener("click", async (event) => {
    event.stopPropagation();
    try {
      await action();
      await refresh();
    } catch (error) {
      say(error.message);
    }
  });
  parent.appendChild(b);
  return b;
}

// ---------------------------------------------------------------- lists

async function refreshDoubts() {
  const doubts = await api("GET", "in-doubt");
  const list = $("doubts");
  list.replaceChildren();
  $("doubt-count").textContent = "(" + doubts.length + ")";
  if (!doubts.length) {
    $("doubts-more").hidden = true;
    list.appendChild(el("p", "empty", "Nothing is in doubt: no step waits for a verdict."));
    return;
  }
  const oldest = Math.max(1, ...doubts.map((d) => d.waitingMs || 0));
  const more = $("doubts-more");
  more.hidden = doubts.length <= doubtsShown;
  more.textContent = "Show " + Math.min(DOUBTS_PAGE, doubts.length - doubtsShown) + " more of " + (doubts.length - doubtsShown) + " not shown";
  for (const doubt of doubts.slice(0, doubtsShown)) {
    const closed = doubt.ended || doubt.cancelled;
    const card = el("article", "card doubt" + (closed ? " cancelled" : ""));
    card.dataset.execution = doubt.execution;
    card.dataset.step = doubt.stepId;
    const head = el("div", "card-head");
    head.append(linkTo(doubt.execution), el("strong", null, doubt.stepId), el("span", "meta", doubt.effect + " · attempt " + doubt.attempt));
    if (closed) head.appendChild(badge(endedWord(doubt)));
    const key = el("div", "meta");
    key.append("key ", el("code", "key", doubt.idempotencyKey));
    const waiting = el("div", "meta", "waiting " + duration(doubt.waitingMs));
    const bar = el("span", "age");
    bar.style.width = Math.max(2, Math.round((100 * (doubt.waitingMs || 0)) / oldest)) + "px";
    waiting.appendChild(bar);
    card.append(head, key, waiting);
    if (doubt.reason) card.appendChild(el("div", "meta", doubt.reason.code + ": " + doubt.reason.message));
    card.appendChild(verdictActions(doubt));
    list.appendChild(card);
  }
}

async function refreshExecutions() {
  const query = new URLSearchParams();
  if ($("filter").value) query.set("status", $("filter").value);
  if ($("flow").value.trim()) query.set("flow", $("flow").value.trim());
  if ($("search").value.trim()) query.set("idPrefix", $("search").value.trim());
  if ($("since").value) query.set("startedFromMs", String(Date.now() - Number($("since").value)));
  if (cursors.length) query.set("before", cursors[cursors.length - 1]);
  // The page alone first, the counts beside it: on a large PostgreSQL store they take longer.
  query.set("counts", "false");
  const serial = ++listing;
  const counted = api("GET", "counts").catch(() => null);
  const page = await api("GET", "executions?" + query);
  nextBefore = page.nextBefore;
  $("older").disabled = !nextBefore;
  $("newest").disabled = cursors.length === 0;
  const body = $("executions").tBodies[0];
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.id : null;
  $("execution-count").textContent = "(" + page.executions.length + " shown)";
  const narrowed = query.has("flow") || query.has("idPrefix") || query.has("startedFromMs");
  counted.then((counts) => {
    if (!counts || serial !== listing) return;
    // The total is said when the counts give it: no filter, or a status alone.
    const status = $("filter").value;
    if (!narrowed) {
      const total = status ? counts.counts[status] : counts.total;
      $("execution-count").textContent = "(" + page.executions.length + " shown of " + total.toLocaleString("en") + ")";
    }
    for (const option of $("filter").options) {
      const count = option.value ? counts.counts[option.value] : counts.total;
      option.textContent = (option.value || "all") + " (" + count.toLocaleString("en") + ")";
    }
  });
  $("executions-empty").hidden = page.executions.length > 0;
  // Only what changed is drawn again: a row whose execution shows the same is kept as it is.
  const kept = new Map(Array.from(body.rows, (row) => [row.dataset.id, row]));
  const rows = page.executions.map((execution) => {
    const flow = execution.flow ? execution.flow + (execution.flowVersion ? " v" + execution.flowVersion : "") : "-";
    const shows = JSON.stringify([execution.status, flow, execution.events, execution.startedAtMs, !!execution.flowNotRegistered]);
    const old = kept.get(execution.id);
    if (old && old.dataset.shows === shows) {
      old.classList.toggle("selected", execution.id === selected);
      // Its age moves on with the clock alone: that one cell, only if its text changes.
      const age = ago(execution.lastEventAtMs);
      const last = old.cells[old.cells.length - 1];
      if (last.textContent !== age) last.textContent = age;
      return old;
    }
    const row = document.createElement("tr");
    row.className = "selectable" + (execution.id === selected ? " selected" : "");
    row.tabIndex = 0;
    row.dataset.id = execution.id;
    row.dataset.shows = shows;
    row.addEventListener("click", () => select(execution.id));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter") select(execution.id);
    });
    const id = cell(row, execution.id, "mono");
    id.title = execution.id;
    id.appendChild(el("span", "sub", utc(execution.startedAtMs)));
    cell(row, badge(execution.status));
    const flowCell = cell(row, flow);
    flowCell.title = flow;
    if (execution.flowNotRegistered) {
      // Nothing on this server drives it: say so where the operator looks.
      flowCell.classList.add("unregistered");
      flowCell.title = flow + ": not registered on this server; it waits for a server that registers it";
    }
    cell(row, execution.events, "num");
    cell(row, ago(execution.lastEventAtMs));
    return row;
  });
  const same = rows.length === body.rows.length && rows.every((row, at) => row === body.rows[at]);
  if (!same) body.replaceChildren(...rows);
  const refocus = focused && rows.find((row) => row.dataset.id === focused);
  if (refocus && document.activeElement !== refocus) refocus.focus();
}

// ---------------------------------------------------------------- one execution

function outcomeBlock(shown) {
  const status = shown.execution.status;
  const outcome = shown.outcome || {};
  const box = el("div", "outcome " + status);
  if (outcome.failure) {
    box.append(el("span", "code", outcome.failure.code), ": " + outcome.failure.message);
  } else if (status === "completed") {
    box.append(el("strong", null, "Output "), payload(outcome.output, "output"));
  } else if (status === "cancelled") {
    box.textContent = "Cancelled: " + (outcome.cancelReason || "no reason given");
  } else {
    const pending = shown.state.pendingGates.filter((g) => !g.eventType.startsWith("loom.")).length;
    const doubts = shown.state.stepsInDoubt.length;
    const parts = [];
    if (doubts) parts.push(doubts + " step(s) wait for a verdict");
    if (pending) parts.push(pending + " gate(s) wait for a resume");
    box.textContent = "Not ended (" + status + ")" + (parts.length ? ": " + parts.join(", ") : "");
  }
  return box;
}

function showFacts(shown) {
  const facts = $("detail-facts");
  facts.replaceChildren();
  const fact = (name, value) => {
    const dd = el("dd");
    if (value instanceof Node) dd.appendChild(value);
    else dd.textContent = value;
    facts.append(el("dt", null, name), dd);
  };
  const outcome = shown.outcome || {};
  fact("flow", (shown.execution.flow || "-") + " v" + shown.execution.flowVersion +
    (shown.execution.flowNotRegistered ? " (not registered on this server: nothing here drives it; it waits for a server that registers it)" : ""));
  fact("input", payload(outcome.input, "input"));
  if (outcome.parent) fact("parent", linkTo(outcome.parent));
  if (outcome.children && outcome.children.length) {
    const list = el("span");
    outcome.children.forEach((child, index) => {
      if (index) list.append(", ");
      list.append(linkTo(child.id), child.ended ? " (ended)" : " (not ended)");
    });
    fact("children", list);
  }
  fact("started", utc(shown.execution.startedAtMs) + " UTC");
  fact("last event", utc(shown.execution.lastEventAtMs) + " UTC (" + ago(shown.execution.lastEventAtMs) + ")");
  fact("events", shown.execution.events);
  fact("budget", shown.state.budgetSpent + " spent" + (shown.state.budget === null ? ", no limit" : " of " + shown.state.budget));
  fact("capabilities", shown.state.capabilities.join(", ") || "-");
  // On PostgreSQL: who holds the lease or held it last; a live one may be a paused worker's.
  if (shown.lease) {
    fact("lease", shown.lease.holder + " (token " + shown.lease.token + "), " + (shown.lease.live ? "live" : "not live"));
  }
}

// The execution's own steps in doubt, each with the verdicts the queue offers.
function showDetailDoubts(shown) {
  const list = $("detail-doubts");
  list.replaceChildren();
  const id = shown.execution.id;
  const ended = ["completed", "failed", "cancelled"].includes(shown.execution.status);
  const doubts = shown.state.steps
    .filter((step) => shown.state.stepsInDoubt.includes(step.stepId))
    .map((step) => ({
      execution: id,
      stepId: step.stepId,
      effect: step.effect,
      attempt: step.attempt,
      idempotencyKey: id + ":" + step.stepId,
      waitingMs: step.inDoubtSinceMs ? Math.max(0, Date.now() - step.inDoubtSinceMs) : null,
      cancelled: ended,
    }));
  $("doubts-block").hidden = doubts.length === 0;
  for (const doubt of doubts) {
    const closed = doubt.ended || doubt.cancelled;
    const card = el("article", "card doubt" + (closed ? " cancelled" : ""));
    card.dataset.step = doubt.stepId;
    const head = el("div", "card-head");
    head.append(el("strong", null, doubt.stepId), el("span", "meta", doubt.effect + " · attempt " + doubt.attempt));
    const key = el("div", "meta");
    key.append("key ", el("code", "key", doubt.idempotencyKey));
    card.append(head, key, el("div", "meta", "waiting " + duration(doubt.waitingMs)), verdictActions(doubt));
    list.appendChild(card);
  }
}

function showGates(shown) {
  const gates = shown.state.pendingGates.filter((gate) => !gate.eventType.startsWith("loom."));
  const list = $("gates");
  list.replaceChildren();
  $("gates-block").hidden = gates.length === 0;
  for (const gate of gates) {
    const card = el("article", "card gate");
    card.dataset.gate = gate.gateId;
    const head = el("div", "card-head");
    head.append(el("strong", null, gate.eventType), el("span", "meta", gate.gateId));
    const key = el("div", "meta");
    key.append("key ", el("code", "key", gate.correlationKey));
    card.append(head, key, el("div", "meta", "waiting " + ago(gate.openedAtMs).replace(" ago", "")));
    if (gate.request !== undefined) {
      const asks = el("div", "meta", "asks ");
      asks.appendChild(payload(gate.request, "request:" + gate.gateId));
      card.appendChild(asks);
    }
    const expects = el("div", "meta", gate.expects ? "expects " + (gate.expects.schema.title || "a payload of a declared shape") : "expects a payload of no declared shape");
    card.appendChild(expects);
    const actions = el("div", "actions");
    actionButton(actions, "Resume…", () => resumeGate(shown.execution.id, gate), "primary");
    card.appendChild(actions);
    list.appendChild(card);
  }
}

// The facts of one step, shown when its row is opened (a list, so a line is easy to add).
function stepFacts(shown, step) {
  const facts = [
    ["idempotency key", shown.execution.id + ":" + step.stepId],
    ["first started", step.startedAtMs ? utc(step.startedAtMs) + " UTC" : "-"],
    ["ended", step.endedAtMs ? utc(step.endedAtMs) + " UTC" : "-"],
    ["attempts", step.attempt === null ? "-" : step.attempt],
    ["running", duration(step.runningMs)],
    ["in doubt", duration(step.inDoubtMs) + (step.inDoubtSinceMs ? ", in doubt since " + utc(step.inDoubtSinceMs) + " UTC" : "")],
    ["waiting", duration(step.waitingMs)],
    ["status recorded at seq", step.seq],
  ];
  return facts;
}

function showSteps(shown) {
  const body = $("steps").tBodies[0];
  body.replaceChildren();
  const ordered = shown.state.steps.slice().sort((a, b) => (a.startedAtMs || 0) - (b.startedAtMs || 0) || a.seq - b.seq);
  $("steps-empty").hidden = ordered.length > 0;
  $("steps").hidden = ordered.length === 0;
  for (const step of ordered) {
    const row = body.insertRow();
    row.className = "selectable";
    row.tabIndex = 0;
    row.dataset.step = step.stepId;
    const toggle = () => {
      openStep = openStep === step.stepId ? null : step.stepId;
      showSteps(shown);
    };
    row.addEventListener("click", toggle);
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter") toggle();
    });
    cell(row, step.stepId, "mono");
    cell(row, step.effect);
    cell(row, badge(step.status));
    cell(row, step.attempt, "num");
    const running = step.status === "started" && step.startedAtMs ? duration(Date.now() - step.startedAtMs) + " so far" : duration(step.runningMs);
    cell(row, running, "num");
    const doubt = step.inDoubtSinceMs ? duration((step.inDoubtMs || 0) + Date.now() - step.inDoubtSinceMs) + " so far" : duration(step.inDoubtMs);
    cell(row, doubt, "num");
    cell(row, duration(step.waitingMs), "num");
    if (openStep === step.stepId) {
      const more = body.insertRow();
      more.className = "step-facts";
      const td = more.insertCell();
      td.colSpan = 7;
      const dl = el("dl", "facts");
      for (const [name, value] of stepFacts(shown, step)) dl.append(el("dt", null, name), el("dd", null, value));
      td.appendChild(dl);
    }
  }
}

// Spans on the timeline, from the log: a step runs from STEP_STARTED to its outcome or doubt,
// is in doubt until a verdict, a new attempt or its outcome; a gate waits from its opening to
// its resume. Open spans run to now.
function timelineRows(events, ended) {
  const rows = new Map();
  const open = new Map();
  const row = (name) => {
    if (!rows.has(name)) rows.set(name, []);
    return rows.get(name);
  };
  const close = (name, at) => {
    const span = open.get(name);
    if (span) {
      span.end = at;
      open.delete(name);
    }
  };
  const start = (name, kind, at) => {
    close(name, at);
    const span = { kind, start: at, end: null };
    row(name).push(span);
    open.set(name, span);
  };
  for (const item of events) {
    const at = item.recordedAtMs;
    const e = item.event;
    if (!at) continue;
    switch (item.type) {
      case "STEP_STARTED":
        start(e.stepId, "running", at);
        break;
      case "EFFECT_INDOUBT":
        start(e.stepId, "in-doubt", at);
        break;
      case "EFFECT_RESOLVED":
        close(e.stepId, at);
        break;
      case "STEP_COMPLETED":
      case "STEP_FAILED":
        if (open.has(e.stepId)) close(e.stepId, at);
        else row(e.stepId).push({ kind: "running", start: at, end: at });
        break;
      case "EXECUTION_SUSPENDED":
        start(e.gateId, "waiting", at);
        break;
      case "EXECUTION_RESUMED":
        close(e.gateId, at);
        break;
      default:
    }
  }
  return { rows, open: ended ? new Map() : open };
}

function showTimeline(shown) {
  const box = $("timeline");
  box.replaceChildren();
  const timed = selectedEvents.filter((e) => e.recordedAtMs);
  if (timed.length < 2) {
    box.appendChild(el("p", "hint", "Not enough recorded times for a timeline yet."));
    return;
  }
  const ended = ["completed", "failed", "cancelled"].includes(shown.execution.status);
  const t0 = timed[0].recordedAtMs;
  const t1 = ended ? timed[timed.length - 1].recordedAtMs : Math.max(Date.now(), timed[timed.length - 1].recordedAtMs);
  const span = Math.max(1, t1 - t0);
  const { rows } = timelineRows(selectedEvents, ended);
  const legend = el("div", "tl-legend");
  legend.append(el("span", "running", "running"), el("span", "in-doubt", "in doubt"), el("span", "waiting", "gate waiting"), el("span", null, duration(t1 - t0) + " in all"));
  box.appendChild(legend);
  let shownRows = 0;
  for (const [name, spans] of rows) {
    if (shownRows++ >= 100) {
      box.appendChild(el("p", "hint", "… " + (rows.size - 100) + " more rows: see the steps and the log below."));
      break;
    }
    const line = el("div", "tl-row");
    const label = el("span", "tl-label", name);
    label.title = name;
    const track = el("div", "tl-track");
    for (const part of spans) {
      const end = part.end === null ? t1 : part.end;
      const bar = el("span", "tl-bar tl-" + part.kind);
      bar.style.left = ((100 * (part.start - t0)) / span).toFixed(2) + "%";
      bar.style.width = ((100 * (end - part.start)) / span).toFixed(2) + "%";
      bar.title = name + ": " + part.kind.replace("-", " ") + " " + duration(end - part.start) + (part.end === null ? " so far" : "");
      track.appendChild(bar);
    }
    line.append(label, track);
    box.appendChild(line);
  }
}

function showEvents(events) {
  const list = $("events");
  for (const event of events) {
    const item = el("li");
    const detail = Object.assign({}, event.event);
    delete detail.type;
    const what = el("span");
    what.append(el("span", "type", event.type), " ");
    what.appendChild(payload(detail));
    item.append(el("span", "seq", event.seq), el("span", "when", utc(event.recordedAtMs)), what);
    list.appendChild(item);
    selectedEvents.push(event);
    selectedFrom = event.seq + 1;
  }
}

async function refreshDetail() {
  if (!selected) return;
  const asked = selected;
  const shown = await api("GET", path(asked));
  // Another execution was opened while this one was read: what arrived is not shown.
  if (asked !== selected) return;
  $("detail-empty").hidden = true;
  $("detail-body").hidden = false;
  $("detail-id").textContent = shown.execution.id;
  const status = $("detail-status");
  status.className = "badge status-" + shown.execution.status;
  status.textContent = shown.execution.status;
  $("outcome").replaceChildren(outcomeBlock(shown));
  showFacts(shown);
  showDetailDoubts(shown);
  showGates(shown);
  if (selectedFrom === 0) showEvents(shown.events);
  showTimeline(shown);
  showSteps(shown);
  $("cancel").disabled = ["completed", "failed", "cancelled"].includes(shown.execution.status);
  for (const row of $("executions").tBodies[0].rows) row.classList.toggle("selected", row.dataset.id === selected);
}

// The execution the address names (`#execution=ID`), or null.
function addressed() {
  return new URLSearchParams(location.hash.slice(1)).get("execution");
}

// Opening an execution adds it to the history (back and forward move between those opened);
// the address bar drives what is shown (see `followAddress`).
async function select(id) {
  if (addressed() !== id) {
    // The address names the execution shown (never the token), so it can be shared.
    history.pushState(null, "", location.pathname + location.search + "#execution=" + encodeURIComponent(id));
  }
  await openExecution(id);
}

// Shows what the address names: on an edited address, back and forward.
function followAddress() {
  if (!token) return;
  const id = addressed();
  if (id && id !== selected) openExecution(id);
  if (!id && selected) closeDetail();
}

function closeDetail() {
  selected = null;
  follow += 1;
  $("detail-body").hidden = true;
  $("detail-empty").hidden = false;
  for (const row of $("executions").tBodies[0].rows) row.classList.remove("selected");
}

async function openExecution(id) {
  selected = id;
  openStep = null;
  expanded.clear();
  selectedFrom = 0;
  selectedEvents = [];
  $("events").replaceChildren();
  follow += 1;
  try {
    await refreshDetail();
    say("");
  } catch (error) {
    say(error.message);
  }
  if (window.matchMedia("(max-width: 1099px)").matches) $("detail").scrollIntoView({ block: "start" });
  followEvents(follow);
}

// Long-polls the selected execution's events until another one is selected or it ends.
async function followEvents(generation) {
  while (generation === follow && selected) {
    try {
      const page = await api("GET", path(selected, "/events?from=" + selectedFrom + "&waitMs=25000"));
      if (generation !== follow) return;
      if (page.events.length) {
        showEvents(page.events);
        await refreshDetail();
      }
      if (page.ended && selectedFrom >= page.head) return;
    } catch (error) {
      say(error.message);
      return;
    }
  }
}

// The header's figures, from the metrics endpoint (Prometheus text, docs/CONSOLE.md "Metrics"):
// steps ended per second since the last refresh, steps in doubt, and how long the execution
// parked longest has waited. Optional: a failure here leaves the strip as it was.
let lastFigures = null;

function metric(text, name) {
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line === undefined ? null : Number(line.slice(name.length + 1));
}

async function refreshFigures() {
  const response = await fetch(new URL("metrics", API), {
    headers: { Authorization: "Bearer " + token },
    cache: "no-store",
  });
  if (!response.ok) return;
  const text = await response.text();
  const at = Date.now();
  const ended = (metric(text, "loom_steps_completed_total") || 0) + (metric(text, "loom_steps_failed_total") || 0);
  const parts = [];
  if (lastFigures && at > lastFigures.at) {
    const rate = Math.max(0, ended - lastFigures.ended) / ((at - lastFigures.at) / 1000);
    parts.push(rate.toFixed(rate < 10 ? 1 : 0) + " steps/s");
  }
  lastFigures = { at, ended };
  parts.push((metric(text, "loom_steps_in_doubt") || 0) + " in doubt");
  const parked = metric(text, "loom_oldest_parked_age_seconds");
  if (parked !== null) parts.push("oldest parked " + duration(Math.round(parked * 1000)));
  $("figures").textContent = parts.join(" · ");
  $("figures").hidden = false;
}

async function refresh() {
  try {
    await Promise.all([refreshDoubts(), refreshExecutions(), refreshDetail(), refreshFigures().catch(() => {})]);
    say("");
  } catch (error) {
    say(error.message);
    if (error.status === 401) logout();
  }
}

function login(newToken) {
  token = newToken;
  sessionStorage.setItem("loom-admin-token", token);
  $("app").hidden = false;
  $("keys").hidden = false;
  $("logout").hidden = false;
  $("connected").hidden = false;
  $("login-fields").hidden = true;
  refresh();
}

function logout() {
  token = "";
  sessionStorage.removeItem("loom-admin-token");
  $("app").hidden = true;
  $("keys").hidden = true;
  $("logout").hidden = true;
  $("connected").hidden = true;
  $("login-fields").hidden = false;
  $("figures").hidden = true;
  lastFigures = null;
}

function moveSelection(step) {
  const rows = Array.from($("executions").tBodies[0].rows);
  if (!rows.length) return;
  const at = rows.indexOf(document.activeElement);
  const next = rows[Math.min(rows.length - 1, Math.max(0, at === -1 ? 0 : at + step))];
  next.focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    login($("token").value);
    $("token").value = "";
  });
  $("logout").addEventListener("click", logout);
  $("home").addEventListener("click", (event) => {
    event.preventDefault();
    cursors = [];
    refresh();
  });
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  $("filter").addEventListener("change", () => {
    cursors = [];
    refresh();
  });
  for (const input of ["flow", "search"]) {
    $(input).addEventListener("input", () => {
      clearTimeout(flowTimer);
      flowTimer = setTimeout(() => {
        cursors = [];
        refresh();
      }, 300);
    });
  }
  $("since").addEventListener("change", () => {
    cursors = [];
    refresh();
  });
  $("older").addEventListener("click", () => {
    if (nextBefore) cursors.push(nextBefore);
    refresh();
  });
  $("newest").addEventListener("click", () => {
    cursors = [];
    refresh();
  });
  $("cancel").addEventListener("click", () => cancelSelected().catch((error) => say(error.message)));
  $("start").addEventListener("click", () => startExecution().catch((error) => say(error.message)));
  $("cancel-many").addEventListener("click", () => cancelMatching().catch((error) => say(error.message)));
  $("doubts-more").addEventListener("click", () => {
    doubtsShown += DOUBTS_PAGE;
    refreshDoubts().catch((error) => say(error.message));
  });
  const fold = (folded) => {
    $("doubts-body").hidden = folded;
    $("doubts-toggle").textContent = folded ? "Show" : "Hide";
    $("doubts-toggle").setAttribute("aria-expanded", String(!folded));
    sessionStorage.setItem("loom-doubts-folded", folded ? "1" : "");
  };
  fold(sessionStorage.getItem("loom-doubts-folded") === "1");
  $("doubts-toggle").addEventListener("click", () => fold(!$("doubts-body").hidden));
  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest && event.target.closest("input, textarea, select, dialog");
    if (typing || event.ctrlKey || event.metaKey || event.altKey || !token) return;
    if (event.key === "/") {
      event.preventDefault();
      $("flow").focus();
    } else if (event.key === "j") {
      moveSelection(1);
    } else if (event.key === "k") {
      moveSelection(-1);
    } else if (event.key === "r") {
      refresh();
    }
  });
  // A link may carry the token in its fragment (never sent to a server): take it, then drop it
  // from the address bar and the history.
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) {
    token = fragment.get("token");
    history.replaceState(null, "", location.pathname + location.search);
  }
  if (token) login(token);
  if (token && fragment.get("execution")) openExecution(fragment.get("execution"));
  window.addEventListener("hashchange", followAddress);
  window.addEventListener("popstate", followAddress);
  setInterval(() => {
    if (token && !$("dialog").open) refresh();
  }, 5000);
});

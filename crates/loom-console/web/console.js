// The Loom web console: lists executions and steps in doubt from the admin API, shows one
// execution live, and sends verdicts, resumes and cancels. Every value from the server is put
// in the page as text (textContent), never as markup. The token stays in this tab's
// sessionStorage and goes out only in the Authorization header of the API's requests.
"use strict";

const API = new URL("v1/", document.baseURI.endsWith("/") ? document.baseURI : document.baseURI + "/");
let token = sessionStorage.getItem("loom-admin-token") || "";
let selected = null;
let selectedFrom = 0;
let follow = 0;

const $ = (id) => document.getElementById(id);

function say(message) {
  $("status").textContent = message || "";
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
    throw error;
  }
  return answer;
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text === undefined || text === null ? "-" : String(text);
  if (className) td.className = className;
  return td;
}

function utc(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "-";
}

function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d" + String(Math.floor((s % 86400) / 3600)).padStart(2, "0") + "h";
}

function button(parent, label, action) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", async (event) => {
    event.stopPropagation();
    try {
      if ((await action()) !== false) {
        say("");
        await refresh();
      }
    } catch (error) {
      say(error.message);
    }
  });
  parent.appendChild(b);
  return b;
}

function askJson(question, initial) {
  const text = prompt(question, initial);
  if (text === null) return undefined;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error("not JSON: " + error.message);
  }
}

function path(id, rest) {
  return "executions/" + encodeURIComponent(id) + (rest || "");
}

async function resolve(doubt, verdict) {
  await api("POST", path(doubt.execution, "/resolve"), {
    stepId: doubt.stepId,
    verdict,
    operator: "web console",
  });
}

async function refreshDoubts() {
  const doubts = await api("GET", "in-doubt");
  const body = $("doubts").tBodies[0];
  body.replaceChildren();
  $("doubt-count").textContent = "(" + doubts.length + ")";
  const oldest = Math.max(1, ...doubts.map((d) => d.waitingMs || 0));
  for (const doubt of doubts) {
    const row = body.insertRow();
    cell(row, doubt.cancelled ? doubt.execution + " (cancelled)" : doubt.execution);
    cell(row, doubt.stepId);
    cell(row, doubt.effect);
    cell(row, doubt.attempt);
    cell(row, doubt.idempotencyKey, "key");
    const waiting = cell(row, duration(doubt.waitingMs));
    const bar = document.createElement("span");
    bar.className = "age";
    bar.style.width = Math.round((100 * (doubt.waitingMs || 0)) / oldest) + "px";
    waiting.appendChild(bar);
    cell(row, doubt.reason ? doubt.reason.code + ": " + doubt.reason.message : "-");
    const actions = row.insertCell();
    if (doubt.cancelled) {
      // Its log is closed: no verdict can be recorded, but the effect may have happened.
      actions.textContent = "cancelled: settle it with the receiver";
      continue;
    }
    button(actions, "Completed…", async () => {
      const output = askJson("Output the step completed with (JSON):", "null");
      if (output === undefined) return false;
      await resolve(doubt, { kind: "completed", output });
    });
    button(actions, "Failed…", async () => {
      const message = prompt("Why the step failed:", "");
      if (message === null) return false;
      await resolve(doubt, { kind: "failed", error: { code: "loom.operator_verdict", message } });
    });
    button(actions, "Retry", async () => {
      if (!confirm("Run " + doubt.effect + " again with key " + doubt.idempotencyKey + "?")) return false;
      await resolve(doubt, { kind: "retry" });
    });
  }
}

async function refreshExecutions() {
  const status = $("filter").value;
  const page = await api("GET", "executions" + (status ? "?status=" + encodeURIComponent(status) : ""));
  const body = $("executions").tBodies[0];
  body.replaceChildren();
  // The newest page only: say how many there are in all.
  $("execution-count").textContent = "(" + page.executions.length + " newest of " + page.total + ")";
  const now = Date.now();
  for (const execution of page.executions) {
    const row = body.insertRow();
    row.className = "selectable";
    row.addEventListener("click", () => select(execution.id));
    cell(row, execution.id);
    cell(row, execution.status, "status-" + execution.status);
    cell(row, execution.flow ? execution.flow + " v" + execution.flowVersion : "-");
    cell(row, execution.events);
    cell(row, utc(execution.startedAtMs));
    cell(row, execution.lastEventAtMs ? duration(now - execution.lastEventAtMs) + " ago" : "-");
  }
}

function showEvents(events) {
  const list = $("events");
  for (const event of events) {
    const item = document.createElement("li");
    const type = document.createElement("span");
    type.className = "type";
    type.textContent = event.type;
    const detail = Object.assign({}, event.event);
    delete detail.type;
    item.append(utc(event.recordedAtMs) + "  ", type, "  " + JSON.stringify(detail));
    list.appendChild(item);
    selectedFrom = event.seq + 1;
  }
}

async function refreshDetail() {
  if (!selected) return;
  const shown = await api("GET", path(selected));
  $("detail").hidden = false;
  $("detail-id").textContent = shown.execution.id;
  const facts = $("detail-facts");
  facts.replaceChildren();
  const fact = (name, value) => {
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    dd.textContent = value;
    facts.append(dt, dd);
  };
  fact("status", shown.execution.status);
  fact("flow", (shown.execution.flow || "-") + " v" + shown.execution.flowVersion);
  fact("budget", shown.state.budgetSpent + " spent" + (shown.state.budget === null ? ", no limit" : " of " + shown.state.budget));
  fact("capabilities", shown.state.capabilities.join(", ") || "-");
  // On PostgreSQL: who holds the lease or held it last; a live one may be a paused worker's.
  if (shown.lease) {
    fact("lease", shown.lease.holder + " (token " + shown.lease.token + "), " + (shown.lease.live ? "live" : "not live"));
  }
  const steps = $("steps").tBodies[0];
  steps.replaceChildren();
  // Step latency, in the order the steps were recorded, with bars against the slowest.
  const took = (step) =>
    step.startedAtMs && step.endedAtMs ? step.endedAtMs - step.startedAtMs : null;
  const slowest = Math.max(1, ...shown.state.steps.map((step) => took(step) || 0));
  const ordered = shown.state.steps.slice().sort((a, b) => a.seq - b.seq);
  for (const step of ordered) {
    const row = steps.insertRow();
    cell(row, step.stepId);
    cell(row, step.effect);
    cell(row, step.status, "status-" + step.status);
    cell(row, step.attempt);
    cell(row, step.seq);
    const ms = took(step);
    const latency = cell(row, ms === null ? "-" : ms < 1000 ? ms + "ms" : duration(ms));
    if (ms !== null) {
      const bar = document.createElement("span");
      bar.className = "age latency";
      bar.style.width = Math.max(1, Math.round((100 * ms) / slowest)) + "px";
      latency.appendChild(bar);
    }
  }
  const gates = $("gates").tBodies[0];
  gates.replaceChildren();
  $("gates").hidden = $("gates-title").hidden = shown.state.pendingGates.length === 0;
  for (const gate of shown.state.pendingGates) {
    const row = gates.insertRow();
    cell(row, gate.gateId);
    cell(row, gate.eventType);
    cell(row, gate.correlationKey, "key");
    cell(row, gate.seq);
    button(row.insertCell(), "Resume…", async () => {
      const payload = askJson("Resume " + gate.eventType + " (" + gate.correlationKey + ") with payload (JSON):", "{}");
      if (payload === undefined) return false;
      await api("POST", path(shown.execution.id, "/resume"), {
        eventType: gate.eventType,
        correlationKey: gate.correlationKey,
        payload,
      });
    });
  }
  $("cancel").disabled = ["completed", "failed", "cancelled"].includes(shown.execution.status);
  if (selectedFrom === 0) showEvents(shown.events);
}

async function select(id) {
  selected = id;
  // The address names the execution shown (never the token), so it can be shared.
  history.replaceState(null, "", location.pathname + location.search + "#execution=" + encodeURIComponent(id));
  selectedFrom = 0;
  $("events").replaceChildren();
  follow += 1;
  await refreshDetail().catch((error) => say(error.message));
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

async function refresh() {
  try {
    await Promise.all([refreshDoubts(), refreshExecutions(), refreshDetail()]);
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
  $("logout").hidden = false;
  $("login-fields").hidden = true;
  refresh();
}

function logout() {
  token = "";
  sessionStorage.removeItem("loom-admin-token");
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login-fields").hidden = false;
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    login($("token").value);
    $("token").value = "";
  });
  $("logout").addEventListener("click", logout);
  $("filter").addEventListener("change", refresh);
  $("cancel").addEventListener("click", async () => {
    if (!selected || !confirm("Cancel execution " + selected + "?")) return;
    try {
      await api("POST", path(selected, "/cancel"), { reason: "cancelled from the web console" });
      await refresh();
    } catch (error) {
      say(error.message);
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
  if (token && fragment.get("execution")) select(fragment.get("execution"));
  setInterval(() => {
    if (token) refresh();
  }, 5000);
});

// saga-supervisor's live dashboard. It renders the snapshots the daemon
// pushes over Server-Sent Events (GET /api/v1/events, "status" events whose
// data is the Dashboard JSON of docs/API.md) and sends the two operator
// actions: halt (anyone who may see the page) and reset (the operator
// token, typed each time, never stored; or, on a listener with a login,
// the operator's session). Everything is drawn with textContent: no data is
// ever parsed as HTML. On a listener with a login (GET /api/v1/session
// says so) the page goes to /login when it has no session or its session
// ends; the session cookie is HttpOnly and never seen here.
"use strict";

// The server sends a snapshot at least every second: none for this long
// and the page is not live.
const STALE_MS = 3000;

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function num(v, digits = 2) {
  return typeof v === "number" && isFinite(v) ? v.toFixed(digits) : "–";
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = c instanceof Node ? el("td") : el("td", null, c);
    if (c instanceof Node) td.appendChild(c);
    tr.appendChild(td);
  }
  return tr;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// pct places v on [lo, hi] as a left offset, clamped to the bar.
function pct(v, lo, hi) {
  if (!(hi > lo) || typeof v !== "number" || !isFinite(v)) return null;
  return Math.min(100, Math.max(0, ((v - lo) / (hi - lo)) * 100));
}

function mark(bar, cls, v, lo, hi, title) {
  const p = pct(v, lo, hi);
  if (p === null) return;
  const m = el("span", "mark " + cls);
  m.style.left = p + "%";
  m.title = title;
  bar.appendChild(m);
}

function bar(lo, hi, loText, hiText) {
  const b = el("div", "bar");
  b.appendChild(el("span", "lo", loText));
  b.appendChild(el("span", "hi", hiText));
  return b;
}

function tag(text, cls) {
  return el("span", "tag " + cls, text);
}

// --- rendering -----------------------------------------------------------

let last = null; // the last snapshot, and when it came
let lastAt = 0;

// The operator's drain and quarantine (ended with saga-supervisor ctl
// undrain / release, or POST /api/v1/undrain, /api/v1/release).
function renderBarriers(st) {
  const d = st.drain;
  if (!d) {
    $("drain").textContent = "drain: none";
  } else if (d.recovered) {
    $("drain").textContent = "DRAINING (new sagas refused) since " + new Date(d.since).toLocaleString() +
      ", from before the last restart — " + d.reason + " — end it: saga-supervisor ctl undrain";
  } else {
    $("drain").textContent = "DRAINING (new sagas refused) since " + new Date(d.since).toLocaleString() +
      "; open sagas unwound at " + new Date(d.deadline).toLocaleString() + " — " + d.reason +
      " — end it: saga-supervisor ctl undrain";
  }
  const q = st.quarantined || [];
  $("quarantined").textContent = q.length === 0 ? "quarantined agents: none"
    : "QUARANTINED: " + q.map((a) => a.agent + " (" + a.reason + ")").join(", ") + " — release: saga-supervisor ctl release AGENT";
}

function render(d) {
  const st = d.status;
  const banner = $("banner");
  if (st.halted) {
    banner.className = "banner halted";
    $("state").textContent = "HALTED";
    $("halt-reason").textContent = st.halt_reason || "";
  } else if (st.ready) {
    banner.className = "banner ready";
    $("state").textContent = "READY";
    $("halt-reason").textContent = "";
  } else {
    banner.className = "banner notready";
    $("state").textContent = "NOT READY";
    $("halt-reason").textContent = "";
  }
  $("reasons").replaceChildren(...(st.reasons || []).map((r) => el("li", null, r)));
  renderBarriers(st);
  // Where the operator finds the token: the path only, never the token.
  $("token-where").textContent = d.reset_token_file
    ? "the operator token is in " + d.reset_token_file
    : "";
  $("token-where").title = d.reset_token_file || "";
  $("asof").textContent = "as of " + new Date(d.at).toLocaleTimeString();

  renderZones(st);
  renderActuators(d);
  renderSupplies(d);
  renderSagas(d);
  fill($("leases").tBodies[0], (st.leases || []).map((l) =>
    row([l.agent, l.ttl_ms + " ms", num(l.expires_in_s, 1) + " s"])));
  if (!st.leases || st.leases.length === 0) fill($("leases").tBodies[0], [row([el("span", "muted", "none")])]);

  const j = st.journal || {};
  $("journal-info").textContent = `${j.dir || ""}: last record ${j.last_seq}, durable ${j.durable_seq}` +
    (j.tail_cut ? ` — torn tail cut at start: ${j.tail_cut}` : "");
  $("journal-error").textContent = [j.error ? "journal failed: " + j.error : "", d.journal_tail_error || ""].filter(Boolean).join(" — ");
  fill($("journal").tBodies[0], (d.journal || []).slice().reverse().map((r) => {
    const tr = row([r.seq, r.type, r.saga || "", r.actuator || "", r.value !== undefined ? num(r.value) : "", r.agent || "", r.code || "", el("span", "hash", r.hash)]);
    tr.dataset.seq = r.seq;
    tr.title = r.message || "";
    return tr;
  }));
  fill($("refused").tBodies[0], (d.refused || []).slice().reverse().map((r) =>
    row([r.seq, r.agent || "", r.actuator || "", tag(r.code || "", "bad"), r.message || ""])));
  const counts = Object.entries(d.refusal_counts || {}).sort((a, b) => b[1] - a[1]);
  $("refusal-counts").textContent = counts.length
    ? "since start: " + counts.map(([c, n]) => `${c} ${n}`).join(", ")
    : "none since start";
}

// Zones (the config's zones): each one's state, a halt button (anyone who
// may see the page) and a reset button (the operator token above, or the
// operator's session).
function renderZones(st) {
  const zs = st.zones || [];
  $("zones-box").hidden = zs.length === 0;
  fill($("zones").tBodies[0], zs.map((z) => {
    const state = z.halted
      ? tag("HALTED" + (z.halt_reason ? ": " + z.halt_reason : ""), "bad")
      : tag("serving", "ok");
    const held = (z.held || []).length ? el("div", "muted", "held: " + z.held.join("; ")) : null;
    const cell = el("span");
    cell.appendChild(state);
    if (held) cell.appendChild(held);
    const halt = el("button", "zone-halt", "Halt zone");
    halt.type = "button";
    halt.addEventListener("click", () => haltZone(z.name));
    const reset = el("button", "zone-reset", "Reset zone");
    reset.type = "button";
    reset.disabled = !z.halted;
    reset.addEventListener("click", () => resetZone(z.name));
    return row([z.name, (z.actuators || []).join(", "), cell, halt, reset]);
  }));
}

async function haltZone(zone) {
  try {
    const r = await post("/api/v1/halt?zone=" + encodeURIComponent(zone), {}, { reason: "dashboard zone halt" });
    if (r.body.ok) say("HALTED zone " + zone, true);
    else say("ZONE HALT: " + refusal(r), false);
  } catch (e) {
    say("ZONE HALT NOT SENT: " + e + " — use another way to stop the robot", false);
  }
}

async function resetZone(zone) {
  const tok = $("token");
  const token = tok.value;
  tok.value = ""; // never kept: typed for each reset
  const op = $("operator").value.trim();
  try {
    const auth = token !== "" || !session.login ? { Authorization: "Bearer " + token } : {};
    const body = { zone: zone };
    if (op) body.operator = op;
    const r = await post("/api/v1/reset", auth, body);
    if (r.body.ok) say("reset zone " + zone, true);
    else say(refusal(r), false);
  } catch (e) {
    say("zone reset not sent: " + e, false);
  }
}

function renderActuators(d) {
  const byName = {};
  for (const a of d.status.actuators || []) byName[a.name] = a;
  const rows = (d.actuators || []).map((cfg) => {
    const a = byName[cfg.name] || {};
    const b = bar(cfg.min, cfg.max, num(cfg.min, 0), num(cfg.max, 0));
    if (cfg.safe_mode === "value") mark(b, "safe", cfg.safe_value, cfg.min, cfg.max, "safe value " + num(cfg.safe_value));
    mark(b, "cmd", a.commanded, cfg.min, cfg.max, "commanded " + num(a.commanded));
    if (a.read_back !== undefined) mark(b, "rb", a.read_back, cfg.min, cfg.max, "read back " + num(a.read_back));
    let rb;
    switch (cfg.reading) {
      case "ok": rb = el("span", null, num(a.read_back)); break;
      case "not_driven": rb = tag("not driven (never commanded, or detached)", "off"); break;
      case "link_lost": rb = tag("LINK LOST", "bad"); break;
      case "error": rb = tag("unreadable: " + (a.error || ""), "bad"); break;
      default: rb = tag("no read-back", "off");
    }
    const safe = cfg.safe_mode === "value" ? "value " + num(cfg.safe_value) : cfg.safe_mode;
    const need = a.approvals_required || 0;
    const kind = need > 1 ? `${cfg.kind} · ${need} approvals` : need === 1 ? `${cfg.kind} · approval` : cfg.kind;
    const tr = row([cfg.name, kind, b, el("span", "commanded", num(a.commanded)), rb, safe]);
    tr.dataset.actuator = cfg.name;
    tr.dataset.reading = cfg.reading;
    tr.cells[3].className = "n";
    tr.cells[4].className = "n";
    return tr;
  });
  fill($("actuators").tBodies[0], rows);
}

function renderSupplies(d) {
  const byName = {};
  for (const s of d.status.supplies || []) byName[s.name] = s;
  const rows = (d.supplies || []).map((cfg) => {
    const s = byName[cfg.name] || {};
    const span = cfg.max_volts - cfg.min_volts;
    const lo = cfg.min_volts - span * 0.25, hi = cfg.max_volts + span * 0.25;
    const b = bar(lo, hi, num(lo, 1), num(hi, 1));
    mark(b, "thr", cfg.min_volts, lo, hi, "min " + num(cfg.min_volts));
    mark(b, "thr", cfg.max_volts, lo, hi, "max " + num(cfg.max_volts));
    if (s.known) mark(b, "volts", s.volts, lo, hi, num(s.volts) + " V");
    let state;
    if (s.tripped) state = tag("TRIPPED " + (s.code || ""), "bad");
    else if (!s.known) state = tag("UNKNOWN", "bad");
    else if (s.stale) state = tag("STALE", "bad");
    else if (s.code && s.code !== "OK") state = tag(s.code === "SUPPLY_LOW" ? "LOW" : s.code, "warn");
    else state = tag("ok", "ok");
    if (s.read_error) state.title = s.read_error;
    const tr = row([cfg.name, b, s.known ? num(s.volts) + " V" : "–", state, s.action || ""]);
    tr.dataset.supply = cfg.name;
    return tr;
  });
  fill($("supplies").tBodies[0], rows);
}

function renderSagas(d) {
  const box = $("sagas");
  if (!d.sagas || d.sagas.length === 0) {
    box.replaceChildren(el("p", "muted", "none"));
    return;
  }
  box.replaceChildren(...d.sagas.map((s) => {
    const div = el("div", "saga");
    div.dataset.saga = s.id;
    div.appendChild(el("strong", null, `saga ${s.id}`));
    div.appendChild(document.createTextNode(` — ${s.agent}`));
    if (s.abort_reason) div.appendChild(tag("unwinding: " + s.abort_reason, "warn"));
    const ol = el("ol");
    for (const st of s.steps) {
      const li = el("li", null, `${st.actuator} → ${num(st.value)} `);
      li.appendChild(st.outcome ? tag(st.outcome, st.outcome === "applied" ? "ok" : "bad") : tag("in flight", "warn"));
      if (st.bucket) li.appendChild(tag(st.bucket, st.bucket === "compensated" ? "ok" : "bad"));
      ol.appendChild(li);
    }
    div.appendChild(ol);
    return div;
  }));
}

// --- liveness ------------------------------------------------------------

function setLive(live, why) {
  const c = $("conn");
  c.className = "conn " + (live ? "up" : "down");
  c.textContent = live ? "live" : "DISCONNECTED — " + why;
  document.body.classList.toggle("stale", !live);
}

let es = null;

// The login, as GET /api/v1/session tells it: {login, role, via,
// expires_at}. No login (loopback): {login: false}.
let session = { login: false };

// toLogin leaves for the login page: the session ended, or there is none.
function toLogin() {
  location.replace("/login");
}

async function whoAmI() {
  const res = await fetch("/api/v1/session", { cache: "no-store", credentials: "same-origin" });
  if (res.status === 401) {
    toLogin();
    return false;
  }
  session = await res.json();
  if (session.login) {
    const until = session.expires_at ? ", until " + new Date(session.expires_at).toLocaleTimeString() : "";
    $("who-text").textContent = "logged in as " + session.role + until;
    $("who").hidden = false;
    // With a session the field may stay empty: the session then decides
    // (an operator's resets without the token typed again; a viewer's is
    // refused FORBIDDEN, and says so). A token typed decides instead.
    $("token").required = false;
    $("token").placeholder = session.role === "operator"
      ? "not needed: logged in as operator"
      : "the operator's (a viewer may not reset)";
  }
  return true;
}

function connect() {
  es = new EventSource("/api/v1/events");
  es.addEventListener("status", (ev) => {
    let d;
    try {
      d = JSON.parse(ev.data);
    } catch (e) {
      setLive(false, "bad data from the server");
      return;
    }
    last = d;
    lastAt = Date.now();
    render(d);
    setLive(true);
  });
  es.onerror = () => {
    setLive(false, "reconnecting…");
    // EventSource retries by itself unless the server refused the stream
    // (503 when too many dashboards are open): then try again later.
    // A stream refused for its session (401) is CLOSED too: then the
    // session has ended, and the page goes to the login.
    if (es.readyState === EventSource.CLOSED) {
      if (session.login) {
        fetch("/api/v1/session", { cache: "no-store", credentials: "same-origin" })
          .then((r) => { if (r.status === 401) toLogin(); })
          .catch(() => {});
      }
      setTimeout(connect, 3000);
    }
  };
}

setInterval(() => {
  if (last && Date.now() - lastAt > STALE_MS) setLive(false, "no data for " + Math.round((Date.now() - lastAt) / 1000) + " s");
}, 500);

// --- actions -------------------------------------------------------------

function say(text, ok) {
  const m = $("action-msg");
  m.textContent = text;
  m.className = ok ? "done" : "refused";
}

async function post(path, headers, body) {
  const res = await fetch(path, {
    method: "POST",
    headers: Object.assign({ "Content-Type": "application/json" }, headers),
    body: JSON.stringify(body),
    cache: "no-store",
    // The session cookie (a listener with a login) goes along; a page of
    // another site never gets it sent (SameSite=Strict).
    credentials: "same-origin",
  });
  let j = {};
  try {
    j = await res.json();
  } catch (e) {
    j = { ok: false, code: "HTTP_" + res.status, message: res.statusText };
  }
  return { status: res.status, body: j };
}

function refusal(r) {
  if (r.body.code === "LOGIN_REQUIRED") return `refused (${r.status}) LOGIN_REQUIRED: the session has ended — log in again (/login)`;
  return `refused (${r.status}) ${r.body.code || ""}: ${r.body.message || ""}`;
}

$("estop").addEventListener("click", async () => {
  try {
    const r = await post("/api/v1/halt", {}, { reason: "dashboard E-STOP" });
    if (r.body.ok) say("HALTED: " + (r.body.halt_reason || ""), true);
    else say("E-STOP NOT SENT: " + refusal(r) + " — use another way to stop the robot", false);
  } catch (e) {
    say("E-STOP NOT SENT: " + e + " — use another way to stop the robot", false);
  }
});

$("reset-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const tok = $("token");
  const token = tok.value;
  tok.value = ""; // never kept: typed for each reset
  const op = $("operator").value.trim();
  try {
    // No token typed: the session decides (an operator's resets, a
    // viewer's is refused FORBIDDEN).
    const auth = token !== "" || !session.login ? { Authorization: "Bearer " + token } : {};
    const r = await post("/api/v1/reset", auth, op ? { operator: op } : {});
    if (r.body.ok) say("reset: " + (r.body.ready ? "ready" : "not ready"), true);
    else say(refusal(r), false);
  } catch (e) {
    say("reset not sent: " + e, false);
  }
});

$("logout").addEventListener("click", async () => {
  try {
    await fetch("/logout", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}", cache: "no-store", credentials: "same-origin" });
  } finally {
    toLogin();
  }
});

whoAmI().then((ok) => { if (ok) connect(); }, () => connect());

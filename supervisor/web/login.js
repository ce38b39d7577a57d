// saga-supervisor's login page. The token is sent once, as
// Authorization: Bearer, in a JSON post to /login (never in the URL or
// the body); the server answers with a session cookie the page cannot
// read (HttpOnly) and the dashboard then uses. The field is cleared at
// once and the token is never stored.
"use strict";

const $ = (id) => document.getElementById(id);

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const tok = $("login-token");
  const token = tok.value;
  tok.value = "";
  const msg = $("login-msg");
  msg.className = "";
  msg.textContent = "logging in…";
  try {
    const res = await fetch("/login", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + token },
      body: "{}",
      cache: "no-store",
      credentials: "same-origin",
    });
    let j = {};
    try {
      j = await res.json();
    } catch (e) {
      j = { code: "HTTP_" + res.status, message: res.statusText };
    }
    if (res.ok && j.ok) {
      msg.className = "done";
      msg.textContent = "logged in as " + j.role;
      location.replace("/");
      return;
    }
    msg.className = "refused";
    msg.textContent = `refused (${res.status}) ${j.code || ""}: ${j.message || ""}`;
  } catch (e) {
    msg.className = "refused";
    msg.textContent = "not sent: " + e;
  }
});

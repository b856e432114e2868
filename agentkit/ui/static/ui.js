// agentkit ui: the live view of a run (server-sent events) and forms sent without a reload.
// Everything a model wrote goes into the page as text (textContent), never as HTML.
"use strict";

function text(el, value) { el.textContent = value; return el; }

function followRun(section) {
  const tools = section.querySelector(".live-tools");
  const answer = section.querySelector(".live-text");
  const status = section.querySelector(".live-status");
  const calls = new Map();
  const source = new EventSource(section.dataset.events);
  let ended = false;

  function end(message) {
    if (ended) return;
    ended = true;
    source.close();
    text(status, message);
    section.dataset.ended = "true";
    if (document.body.dataset.reloadOnEnd !== "false" && !section.closest("[data-celery]")) {
      window.setTimeout(() => window.location.reload(), 400);
    }
  }

  source.addEventListener("message_update", (e) => {
    const update = JSON.parse(e.data).update || {};
    if (update.type === "text_delta") answer.textContent += update.delta;
    if (update.type === "thinking_delta") text(status, "thinking…");
  });
  source.addEventListener("message_start", () => {
    if (answer.textContent && !answer.textContent.endsWith("\n")) answer.textContent += "\n";
  });
  source.addEventListener("tool_execution_start", (e) => {
    const event = JSON.parse(e.data);
    const li = document.createElement("li");
    li.dataset.call = event.tool_call_id;
    text(li, "→ " + event.tool_name + " " + JSON.stringify(event.args));
    tools.appendChild(li);
    calls.set(event.tool_call_id, li);
    text(status, "running " + event.tool_name + "…");
  });
  source.addEventListener("tool_execution_end", (e) => {
    const event = JSON.parse(e.data);
    const li = calls.get(event.tool_call_id) || tools.appendChild(document.createElement("li"));
    li.dataset.ended = event.is_error ? "error" : "ok";
    text(li, "← " + event.tool_name + (event.is_error ? " error" : " ok") +
      (event.duration_ms != null ? " " + Math.round(event.duration_ms) + " ms" : ""));
    text(status, "running…");
  });
  for (const name of ["agent_end", "run_end", "end"]) {
    source.addEventListener(name, () => end("finished"));
  }
}

async function sendForm(form, event) {
  event.preventDefault();
  const status = form.closest("section")?.querySelector(".live-status");
  const response = await fetch(form.action, {
    method: "POST",
    body: new FormData(form),
    headers: { "Accept": "application/json", "X-CSRF-Token": document.body.dataset.csrf },
    credentials: "same-origin",
  });
  const answer = await response.json().catch(() => ({ message: response.statusText }));
  if (status) text(status, answer.message);
  const input = form.querySelector("input[name=text]");
  if (response.ok && input) input.value = "";
}

document.addEventListener("DOMContentLoaded", () => {
  for (const section of document.querySelectorAll("section.live[data-events]")) followRun(section);
  for (const form of document.querySelectorAll("form[data-fetch]")) {
    form.addEventListener("submit", (event) => sendForm(form, event));
  }
});

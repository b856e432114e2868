// agentkit ui: the live view of a run (server-sent events) and forms sent without a reload.
// Everything a model wrote goes into the page as text (textContent), never as HTML.
"use strict";

function text(el, value) { el.textContent = value; return el; }

const ENDED = {
  stop: "finished", aborted: "aborted", error: "failed", approval: "waiting for approval",
  interrupted: "interrupted: its process stopped", budget: "ended by its budget",
  length: "cut off at the token limit",
};

// A run's events from its log (or a Celery run's stream). The browser's EventSource reconnects
// by itself, sending the last event's id: the server resumes right after it, so a dropped
// connection loses nothing and repeats nothing.
function followRun(section) {
  const tools = section.querySelector(".live-tools");
  const answer = section.querySelector(".live-text");
  const status = section.querySelector(".live-status");
  const calls = new Map();
  const source = new EventSource(section.dataset.events);
  let ended = false;

  function end(message, state) {
    if (ended) return;
    ended = true;
    source.close();
    text(status, message);
    section.dataset.ended = state || "ended";
    for (const form of section.querySelectorAll("form[data-fetch]")) form.hidden = true;
    if (document.body.dataset.reloadOnEnd !== "false" && !section.closest("[data-celery]")) {
      window.setTimeout(() => window.location.reload(), 400);
    }
  }

  source.addEventListener("message_update", (e) => {
    const data = JSON.parse(e.data);
    const update = data.update || {};  // a Celery run's stream nests the update
    const kind = data.kind || update.type;
    const delta = data.delta !== undefined ? data.delta : update.delta;
    if (kind === "text_delta") answer.textContent += delta;
    if (kind === "thinking_delta") text(status, "thinking…");
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
  source.addEventListener("run_command", (e) => {
    text(status, JSON.parse(e.data).command + " received");
  });
  source.addEventListener("run_end", (e) => {
    const reason = JSON.parse(e.data).stop_reason;
    end(ENDED[reason] || ("ended: " + reason), reason);
  });
  for (const name of ["done", "end"]) {
    source.addEventListener(name, (e) => {
      const reason = e.data ? JSON.parse(e.data).stop_reason : undefined;
      end(reason ? (ENDED[reason] || ("ended: " + reason)) : "finished", reason);
    });
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

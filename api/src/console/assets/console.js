// The console's one script (served from the binary; pages work without it).
// Copy buttons: `data-copy` holds the text to copy.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  navigator.clipboard.writeText(button.dataset.copy).then(
    () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = "Copy"; }, 1500); },
    () => { button.textContent = "Select and copy"; }
  );
});

// As the pages do (api/src/console/text.rs): invisible characters and
// those that reorder text are shown as a marked <U+XXXX>.
const INVISIBLE = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890\u0891\u08E2\u115F\u1160\u180E\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u206F\u3164\uFEFF\uFFA0\uFFF9-\uFFFB\u{110BD}\u{110CD}\u{13430}-\u{1343F}\u{1BCA0}-\u{1BCA3}\u{1D173}-\u{1D17A}\u{E0001}\u{E0020}-\u{E007F}]/u;
function shown(parent, text) {
  for (const part of String(text).split(new RegExp("(" + INVISIBLE.source + ")", "u"))) {
    if (part.length > 0 && INVISIBLE.test(part) && [...part].length === 1) {
      const mark = document.createElement("span");
      const hex = part.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
      mark.className = "invisible";
      mark.title = "U+" + hex + ": an invisible character";
      mark.textContent = "<U+" + hex + ">";
      parent.appendChild(mark);
    } else if (part.length > 0) {
      parent.appendChild(document.createTextNode(part));
    }
  }
}

// The audit log's live mode: follow the namespace's events (the API's tail,
// Server-Sent Events named by their type) and put each new one at the top
// of the table. Text only: nothing from an event is read as markup.
(() => {
  const box = document.getElementById("live");
  const table = document.getElementById("events");
  if (!box || !table) return;
  let reader = null;

  // An environment's values are never shown: its names are.
  function hideEnvValues(data) {
    if (Array.isArray(data)) return data.map(hideEnvValues);
    if (data === null || typeof data !== "object") return data;
    const out = {};
    for (const [k, v] of Object.entries(data)) {
      if ((k === "env_vars" || k === "env") && v !== null && typeof v === "object" && !Array.isArray(v)) {
        out[k] = Object.fromEntries(Object.keys(v).map((name) => [name, "(hidden)"]));
      } else {
        out[k] = hideEnvValues(v);
      }
    }
    return out;
  }

  // A scaling event in words, as the server writes it (activity.rs, in_words).
  function inWords(entry) {
    const d = entry.data || {};
    if (typeof d.reason !== "string") return null;
    if (entry.type === "FunctionScaled") return d.from + " \u2192 " + d.to + " instances (" + d.window + " window): " + d.reason;
    if (entry.type === "FunctionScaledToZero") return "\u2192 0 instances: " + d.reason;
    if (entry.type === "FunctionScaledUp") return "started from zero: " + d.reason;
    return null;
  }

  function row(entry) {
    const tr = document.createElement("tr");
    tr.className = "new";
    const cells = [entry.time, entry.type, entry.stream, entry.actor || "", JSON.stringify(hideEnvValues(entry.data))];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      const words = i === 4 ? inWords(entry) : null;
      if (words) {
        const reason = document.createElement("span");
        reason.className = "reason";
        shown(reason, words);
        td.appendChild(reason);
        td.appendChild(document.createElement("br"));
      }
      if (i === 2 || i === 4) {
        const code = document.createElement("code");
        shown(code, text);
        td.appendChild(code);
      } else {
        shown(td, text);
      }
      tr.appendChild(td);
    });
    table.insertBefore(tr, table.firstChild);
  }

  async function follow() {
    const res = await fetch(box.dataset.stream, { headers: { Accept: "text/event-stream" } });
    if (!res.ok || !res.body) return;
    reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
        if (data) {
          try { row(JSON.parse(data)); } catch (_) { /* not an event */ }
        }
      }
    }
  }

  box.addEventListener("change", () => {
    if (box.checked) {
      document.body.dataset.live = "on";
      follow().catch(() => { box.checked = false; document.body.dataset.live = "off"; });
    } else if (reader) {
      reader.cancel();
      reader = null;
      document.body.dataset.live = "off";
    }
  });
})();

// A function's log, live: follow its tail (the API's, as the session's
// caller), from the last line the page shows, and add each new line at the
// bottom of the table. A tail that ends is taken up again after the last
// line added (Last-Event-ID), so none is missed or added twice. Text only.
(() => {
  const box = document.getElementById("live-logs");
  const table = document.getElementById("log-lines");
  if (!box || !table) return;
  let reader = null;
  let last = null;

  function row(line) {
    const tr = document.createElement("tr");
    tr.className = line.stream === "stderr" ? "new stderr" : "new";
    const time = document.createElement("td");
    time.className = "time";
    shown(time, String(line.at).replace("T", " ").slice(0, 23));
    const call = document.createElement("td");
    if (line.invocation) {
      const a = document.createElement("a");
      a.href = box.dataset.calls + encodeURIComponent(line.invocation);
      a.title = line.invocation;
      const code = document.createElement("code");
      code.textContent = String(line.invocation).slice(-8);
      a.appendChild(code);
      call.appendChild(a);
    } else {
      call.textContent = "\u2013";
    }
    const stream = document.createElement("td");
    stream.className = "stream";
    shown(stream, line.stream);
    const text = document.createElement("td");
    text.className = "line";
    shown(text, line.line);
    tr.append(time, call, stream, text);
    table.appendChild(tr);
  }

  async function follow() {
    const headers = { Accept: "text/event-stream" };
    if (last !== null) headers["Last-Event-ID"] = last;
    const res = await fetch(box.dataset.stream, { headers });
    if (!res.ok || !res.body) throw new Error("the tail was refused");
    reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const fields = buffer.slice(0, end).split("\n");
        buffer = buffer.slice(end + 2);
        const field = (name) => fields.filter((l) => l.startsWith(name + ":")).map((l) => l.slice(name.length + 1).trimStart());
        const data = field("data").join("\n");
        if (!data || (field("event")[0] || "message") !== "line") continue;
        try { row(JSON.parse(data)); } catch (_) { continue; /* not a line */ }
        const id = field("id").pop();
        if (id !== undefined) last = id;
      }
    }
  }

  async function live() {
    while (box.checked) {
      try { await follow(); } catch (_) { box.checked = false; break; }
      // The server ended it (it stopped, or the database failed): again,
      // after the last line added.
      if (box.checked) await new Promise((r) => setTimeout(r, 1000));
    }
    document.body.dataset.live = "off";
  }

  box.addEventListener("change", () => {
    if (box.checked) {
      document.body.dataset.live = "on";
      live();
    } else if (reader) {
      reader.cancel();
      reader = null;
    }
  });
})();

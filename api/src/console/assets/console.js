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

// The audit log's live mode: follow the namespace's events (the API's tail,
// Server-Sent Events named by their type) and put each new one at the top
// of the table. Text only: nothing from an event is read as markup.
(() => {
  const box = document.getElementById("live");
  const table = document.getElementById("events");
  if (!box || !table) return;
  let reader = null;

  function row(entry) {
    const tr = document.createElement("tr");
    tr.className = "new";
    const cells = [entry.time, entry.type, entry.stream, entry.actor || "", JSON.stringify(entry.data)];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      if (i === 2 || i === 4) {
        const code = document.createElement("code");
        code.textContent = text;
        td.appendChild(code);
      } else {
        td.textContent = text;
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

// Live check of a task before submission: a quick local look, then the server's `ast` check.
// Every message is set with textContent: nothing from the source ever becomes HTML.
(function () {
  "use strict";
  const form = document.getElementById("new-job-form");
  if (!form) return;
  const source = document.getElementById("id_source");
  const file = document.getElementById("id_file");
  const list = document.getElementById("live-check");
  const submit = document.getElementById("submit-job");
  const maxBytes = parseInt(form.dataset.maxBytes, 10);
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  let timer = null;
  let seq = 0;

  function show(items) {
    list.replaceChildren();
    for (const [ok, text] of items) {
      const li = document.createElement("li");
      li.className = ok ? "ok" : "error";
      li.textContent = (ok ? "✓ " : "✗ ") + text;
      list.appendChild(li);
    }
  }

  function localCheck(text) {
    const bytes = new Blob([text]).size;
    return [
      [bytes > 0 && bytes <= maxBytes, bytes > maxBytes ? `too large (${bytes} bytes, limit ${maxBytes})` : bytes === 0 ? "empty" : `${bytes} bytes`],
      [/^class\s+Model\s*[(:]/m.test(text), "defines class Model"],
      [/^def\s+get_inputs\s*\(/m.test(text), "defines get_inputs()"],
      [/^def\s+get_init_inputs\s*\(/m.test(text), "defines get_init_inputs()"],
    ];
  }

  async function check(text) {
    const local = localCheck(text);
    show(local);
    const mine = ++seq;
    const body = new URLSearchParams({ source: text });
    try {
      const resp = await fetch(form.dataset.checkUrl, { method: "POST", body, headers: { "X-CSRFToken": csrf }, credentials: "same-origin" });
      const data = await resp.json();
      if (mine !== seq) return;
      const items = data.ok ? local.concat([[true, "parses (server check)"]]) : local.concat(data.errors.map((e) => [false, e]));
      show(items);
      setSubmit(data.ok, "the task does not pass the check above");
      form.dataset.checked = data.ok ? "ok" : "error";
    } catch (err) {
      // The server check is advisory; the form is checked again on submission.
      setSubmit(local.every(([ok]) => ok), "the task does not pass the check above");
    }
  }

  // Nothing to submit yet: the button waits for a task (the server would only refuse an empty one).
  const why = document.getElementById("submit-why");
  function setSubmit(enabled, reason) {
    submit.disabled = !enabled;
    if (why) why.textContent = enabled ? "" : reason;
  }

  // What the selected preset / torch-ops choice means, under the options.
  for (const select of form.querySelectorAll("select[data-help]")) {
    const help = document.getElementById(select.dataset.help);
    const label = select.name === "preset" ? "Tolerance preset " : "torch ops ";
    select.addEventListener("change", () => {
      const opt = select.selectedOptions[0];
      if (help && opt) help.textContent = label + opt.value + ": " + (opt.dataset.help || "");
    });
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(() => check(source.value), 250);
  }

  source.addEventListener("input", () => {
    if (!source.value.trim()) { clearTimeout(timer); seq++; list.replaceChildren(); setSubmit(false, "upload or paste a task first"); return; }
    schedule();
  });
  file.addEventListener("change", () => {
    const f = file.files[0];
    if (!f) return;
    if (f.size > maxBytes) { show([[false, `file too large (${f.size} bytes, limit ${maxBytes})`]]); setSubmit(false, "the file is too large"); return; }
    f.text().then((text) => { source.value = text; check(text); });
  });
  if (source.value) check(source.value);
  else setSubmit(false, "upload or paste a task first");
})();

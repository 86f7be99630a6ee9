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

  // Any module: the server lists its nn.Module classes (parsed with ast, never imported); the
  // user picks one and gives constructor arguments and input specs, checked by the server too.
  const picker = document.getElementById("module-pick");
  const classSelect = document.getElementById("id_module_class");
  const initArgs = document.getElementById("id_init_args");
  const inputSpecs = document.getElementById("id_input_specs");
  let classes = [];

  function showClasses(found) {
    classes = found;
    const keep = classSelect.value || picker.dataset.class || "";
    classSelect.replaceChildren();
    const none = document.createElement("option");
    none.value = ""; none.textContent = "choose a class…";
    classSelect.appendChild(none);
    for (const c of found) {
      const opt = document.createElement("option");
      opt.value = c.name;
      opt.textContent = c.name + "(" + c.init_params.join(", ") + ")" + (c.doc ? " · " + c.doc : "");
      classSelect.appendChild(opt);
    }
    if (found.some((c) => c.name === keep)) classSelect.value = keep;
    else if (found.length === 1) classSelect.value = found[0].name;
    document.getElementById("module-found").textContent = found.length + " nn.Module class" + (found.length === 1 ? "" : "es") +
      " found: " + found.map((c) => c.name).join(", ") + ". Pick the one to optimize.";
    describeClass();
  }

  function describeClass() {
    const c = classes.find((x) => x.name === classSelect.value);
    const sig = document.getElementById("module-signature");
    if (!c) { sig.textContent = ""; return; }
    const fwd = c.forward_params === null ? "forward inherited" : "forward(" + c.forward_params.join(", ") + ")";
    sig.textContent = c.name + "(" + c.init_params.join(", ") + ") · " + fwd + " · line " + c.line;
    if (c.forward_params) inputSpecs.placeholder = c.forward_params.filter((p) => !p.startsWith("*")).map((p) => p.split("=")[0] + ": e.g. float32[8,64]").join("\n");
  }

  function moduleReady() {
    return !picker.hidden && classSelect.value && inputSpecs.value.trim();
  }

  async function check(text) {
    const local = localCheck(text);
    const mine = ++seq;
    const body = new URLSearchParams({ source: text });
    if (!picker.hidden && classSelect.value) {
      body.set("module_class", classSelect.value);
      body.set("init_args", initArgs.value);
      body.set("input_specs", inputSpecs.value);
    }
    form.dataset.checking = "1";
    try {
      const resp = await fetch(form.dataset.checkUrl, { method: "POST", body, headers: { "X-CSRFToken": csrf }, credentials: "same-origin" });
      const data = await resp.json();
      if (mine !== seq) return;
      delete form.dataset.checking;
      const asModule = !data.kernelbench && data.classes && data.classes.length > 0;
      picker.hidden = !asModule;
      if (asModule) {
        showClasses(data.classes);
        const items = [local[0], [true, "parses (server check)"]];
        if (!classSelect.value) items.push([false, "pick the class to optimize below"]);
        else if (!inputSpecs.value.trim()) items.push([false, "give an input spec for each input of forward()"]);
        else if (!body.has("module_class")) { schedule(); return; } // the class was just picked: check it with its inputs
        else items.push(...(data.ok ? [[true, classSelect.value + " as a KernelBench task"]] : data.errors.map((e) => [false, e])));
        show(items);
        setSubmit(data.ok && moduleReady(), "pick a class and give its inputs");
      } else {
        show(data.ok ? local.concat([[true, "parses (server check)"]]) : local.concat(data.errors.map((e) => [false, e])));
        setSubmit(data.ok, "the task does not pass the check above");
      }
      form.dataset.checked = data.ok ? "ok" : "error";
    } catch (err) {
      // The server check is advisory; the form is checked again on submission.
      if (mine !== seq) return;
      delete form.dataset.checking;
      show(local);
      setSubmit(local.every(([ok]) => ok), "the task does not pass the check above");
    }
  }

  classSelect.addEventListener("change", () => { describeClass(); schedule(); });
  initArgs.addEventListener("input", schedule);
  inputSpecs.addEventListener("input", schedule);

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
    form.dataset.checking = "1"; // until the answer is shown (tests and the submit wait for it)
    clearTimeout(timer);
    timer = setTimeout(() => check(source.value), 250);
  }

  source.addEventListener("input", () => {
    if (!source.value.trim()) { clearTimeout(timer); seq++; delete form.dataset.checking; list.replaceChildren(); setSubmit(false, "upload or paste a task first"); return; }
    schedule();
  });
  // A .pt2 (torch.export.save): the file itself is the task; the server reads its table of
  // contents and recorded inputs (never loads it) and the source box is set aside.
  const exportedNote = document.getElementById("exported-note");
  const maxExported = parseInt(form.dataset.maxExportedBytes, 10);

  function setExported(on) {
    exportedNote.hidden = !on;
    source.disabled = on;
    if (on) { source.value = ""; picker.hidden = true; }
  }

  async function checkExported(f) {
    const mine = ++seq;
    clearTimeout(timer);
    if (f.size > maxExported) { show([[false, `.pt2 file too large (${f.size} bytes, limit ${maxExported})`]]); setSubmit(false, "the file is too large"); return; }
    const body = new FormData();
    body.set("file", f);
    form.dataset.checking = "1";
    try {
      const resp = await fetch(form.dataset.checkUrl, { method: "POST", body, headers: { "X-CSRFToken": csrf }, credentials: "same-origin" });
      const data = await resp.json();
      if (mine !== seq) return;
      if (data.ok) {
        const inputs = data.exported.inputs;
        show([[true, `ExportedProgram, ${data.exported.bytes} bytes` + (data.exported.torch_version ? ` (saved by torch ${data.exported.torch_version})` : "")],
              [true, "recorded inputs: " + (inputs.length ? inputs.join("; ") : "none")]]);
      } else show(data.errors.map((e) => [false, e]));
      setSubmit(data.ok, "the .pt2 file does not pass the check above");
      form.dataset.checked = data.ok ? "ok" : "error";
    } catch (err) {
      if (mine !== seq) return;
      show([[true, `.pt2 file, ${f.size} bytes (checked again on submission)`]]);
      setSubmit(true, "");
    } finally {
      if (mine === seq) delete form.dataset.checking;
    }
  }

  file.addEventListener("change", () => {
    const f = file.files[0];
    if (!f) { setExported(false); return; }
    if (f.name.toLowerCase().endsWith(".pt2")) { setExported(true); checkExported(f); return; }
    setExported(false);
    if (f.size > maxBytes) { show([[false, `file too large (${f.size} bytes, limit ${maxBytes})`]]); setSubmit(false, "the file is too large"); return; }
    f.text().then((text) => { source.value = text; check(text); });
  });
  if (source.value) check(source.value);
  else setSubmit(false, "upload or paste a task first");
})();

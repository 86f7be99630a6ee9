// The diff layout toggle (unified / side by side). Both layouts are in the server's HTML; this
// only sets a class on <html>, so turns fetched later follow the choice too. The choice is kept in
// localStorage; a page states its own default (data-default) for visitors who never chose.
(function () {
  "use strict";
  const KEY = "kw.diffMode";
  const box = document.querySelector(".diff-mode");
  if (!box) return;
  let stored = null;
  try { stored = window.localStorage.getItem(KEY); } catch (e) { stored = null; }
  function apply(mode) {
    mode = mode === "split" ? "split" : "unified";
    document.documentElement.classList.toggle("diff-split", mode === "split");
    document.documentElement.dataset.diffMode = mode;
    for (const input of box.querySelectorAll("input[name='diff-mode']")) input.checked = input.value === mode;
  }
  apply(stored || box.dataset.default);
  box.addEventListener("change", (ev) => {
    if (ev.target.name !== "diff-mode") return;
    apply(ev.target.value);
    try { window.localStorage.setItem(KEY, ev.target.value); } catch (e) { /* private mode: not remembered */ }
  });
})();

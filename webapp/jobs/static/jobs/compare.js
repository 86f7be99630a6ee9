// The compare pickers: choosing another job reloads the page with that job's turns to pick from
// (the turn and share token of the job chosen before no longer apply). Writes nothing into the page.
(function () {
  "use strict";
  const form = document.getElementById("compare-form");
  if (!form) return;
  for (const select of form.querySelectorAll("select.pick-job")) {
    select.addEventListener("change", () => {
      const box = select.closest("fieldset");
      const turn = box.querySelector("select.pick-turn");
      if (turn) turn.value = "";
      const share = box.querySelector("input.pick-share");
      if (share) share.remove();
      form.submit();
    });
  }
})();

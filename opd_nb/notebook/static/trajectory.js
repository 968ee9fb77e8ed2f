// A saved trajectory view with no kernel: "expand all" / "collapse all" open every span row, and
// "only slow or failed spans" hides the rest (rows are <details>, which open on a click without any
// script). Runs once, on the element just before this script, so views never touch each other.
(function (root) {
  if (!root || root.dataset.opdTraj === "1") return;
  root.dataset.opdTraj = "1";
  const rows = () => Array.from(root.querySelectorAll("details.opd-span"));
  root.querySelectorAll("[data-act]").forEach((control) => {
    const act = control.dataset.act;
    const run = () => {
      if (act === "open" || act === "close") rows().forEach((d) => { d.open = act === "open"; });
      if (act === "only") {
        rows().forEach((d) => { d.style.display = control.checked && !d.dataset.flags ? "none" : ""; });
      }
    };
    control.addEventListener(act === "only" ? "change" : "click", run);
  });
})(document.currentScript && document.currentScript.previousElementSibling);

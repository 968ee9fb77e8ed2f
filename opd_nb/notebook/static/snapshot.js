// A saved snapshot's tables, interactive with no kernel: click a column header to sort its rows
// (numbers as numbers, blanks last; again to reverse), and click a row that names a sample
// (data-sample) to show that sample's pane. Runs once, on the element just before this script,
// so several snapshots on one page (or in one nbconvert export) never touch each other.
(function (root) {
  if (!root || root.dataset.opdSnap === "1") return;
  root.dataset.opdSnap = "1";
  const text = (cell) => (cell ? cell.textContent.trim() : "");
  const number = (s) => {
    const v = parseFloat(s.replace(/^[\u25B6+]/, "").replace(/,/g, ""));
    return /^[\u25B6]?[-+]?(\d|\.\d)/.test(s) && isFinite(v) ? v : null;
  };
  root.querySelectorAll("table").forEach((table) => {
    const body = table.tBodies[0];
    const heads = table.tHead ? Array.from(table.tHead.rows[0].cells) : [];
    if (!body || body.rows.length < 2) return;
    heads.forEach((th, col) => {
      th.style.cursor = "pointer";
      th.title = "sort by " + text(th);
      th.addEventListener("click", () => {
        const down = th.dataset.sort !== "asc";
        heads.forEach((h) => { delete h.dataset.sort; h.textContent = h.textContent.replace(/ [▲▼]$/, ""); });
        th.dataset.sort = down ? "asc" : "desc";
        th.textContent += down ? " ▲" : " ▼";
        const rows = Array.from(body.rows);
        const key = (r) => text(r.cells[col]);
        const numeric = rows.every((r) => key(r) === "" || number(key(r)) !== null);
        rows.sort((a, b) => {
          const x = key(a), y = key(b);
          if (x === "" || y === "") return (x === "") - (y === "");  // blanks last either way
          const c = numeric ? number(x) - number(y) : x.localeCompare(y, undefined, { numeric: true });
          return down ? c : -c;
        });
        rows.forEach((r) => body.appendChild(r));
      });
    });
  });
  const panes = root.querySelectorAll(".opd-sample[data-sample]");
  root.querySelectorAll("tr[data-sample]").forEach((row) => {
    row.style.cursor = "pointer";
    row.addEventListener("click", () => {
      panes.forEach((p) => { p.style.display = p.dataset.sample === row.dataset.sample ? "" : "none"; });
      root.querySelectorAll("tr[data-sample]").forEach((r) => { r.style.background = r === row ? "rgba(9,105,218,0.12)" : ""; });
    });
  });
})(document.currentScript && document.currentScript.previousElementSibling);

// A saved snapshot's tables, interactive with no kernel: click a column header to sort its rows
// (numbers as numbers, text as text, blanks last; again to reverse), and click a row that names a
// sample (data-sample) to show that sample's pane: the row gets the selection mark and the highlight, and the
// pane scrolls into sight. Runs once, on the element just before this script, so several snapshots on
// one page (or in one nbconvert export) never touch each other. Where a host strips scripts (an
// untrusted notebook), the HTML stays a static table and its hint line says how to get this back.
(function (root) {
  if (!root || root.dataset.opdSnap === "1") return;
  root.dataset.opdSnap = "1";
  const MARK = "\u25B6";
  const text = (cell) => (cell ? cell.textContent.trim() : "");
  // a number as people write one: no leading zeros ("046" is a label, not 46), thousands commas allowed
  const NUMBER = /^[-+]?(?:0|[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d*)?(?:\.\d+)?(?:e[-+]?\d+)?%?$/i;
  const number = (s) => {
    s = s.replace(/^\u25B6/, "");
    return /\d/.test(s) && NUMBER.test(s) ? parseFloat(s.replace(/,/g, "")) : null;
  };
  root.querySelectorAll(".opd-snap-hint[data-live]").forEach((h) => {
    h.textContent = "";
    h.appendChild(document.createElement("small")).textContent = h.dataset.live;
  });
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
        // a column says what it holds (data-type), else it is numeric when every cell is a number
        const numeric = th.dataset.type ? th.dataset.type === "number"
          : rows.every((r) => key(r) === "" || number(key(r)) !== null);
        rows.sort((a, b) => {
          const x = key(a), y = key(b);
          if (x === "" || y === "") return (x === "") - (y === "");  // blanks last either way
          const c = numeric ? (number(x) ?? 0) - (number(y) ?? 0) : x < y ? -1 : x > y ? 1 : 0;
          return down ? c : -c;
        });
        rows.forEach((r) => body.appendChild(r));
      });
    });
  });
  const panes = root.querySelectorAll(".opd-sample[data-sample]");
  const picks = root.querySelectorAll("tr[data-sample]");
  const mark = (row) => picks.forEach((r) => {
    const on = r === row, first = r.cells[0];
    r.style.background = on ? "rgba(9,105,218,0.12)" : "";
    r.setAttribute("aria-selected", on ? "true" : "false");
    if (first) first.textContent = (on ? MARK : "") + first.textContent.replace(MARK, "");
  });
  mark(Array.from(picks).find((r) => text(r.cells[0]).startsWith(MARK)));
  picks.forEach((row) => {
    row.style.cursor = "pointer";
    row.addEventListener("click", () => {
      let shown = null;
      panes.forEach((p) => {
        const on = p.dataset.sample === row.dataset.sample;
        p.style.display = on ? "" : "none";
        if (on) shown = p;
      });
      mark(row);
      if (shown && shown.scrollIntoView) shown.scrollIntoView({ block: "nearest" });
    });
  });
})(document.currentScript && document.currentScript.previousElementSibling);

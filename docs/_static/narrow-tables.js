// On a phone, kerasdist.css shows each row of a table of three or more columns as a block; each
// cell then carries its column's name (data-label), which the style writes before the value.
"use strict";

function labelTableCells() {
  for (const table of document.querySelectorAll(".bd-article table")) {
    const names = [...table.querySelectorAll("thead th")].map((heading) => heading.innerText.trim());
    if (names.length < 3) continue;
    for (const row of table.querySelectorAll("tbody tr")) {
      [...row.children].forEach((cell, index) => {
        if (names[index]) cell.dataset.label = names[index];
      });
    }
  }
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", labelTableCells);
} else {
  labelTableCells();
}

// The lessons' Python | R switch (docs/lessons.py): opens the twin at the section being read and
// remembers the choice, so that the sidebar, the previous/next links and the next lesson opened
// follow it. Without this script the switch is a plain link to the twin's first section.
"use strict";

const LANGUAGE_KEY = "kerasdist-language";
// A section counts as the one being read once its heading is above this part of the window.
const READING_LINE = 0.3;

function storedLanguage() {
  try {
    return window.localStorage.getItem(LANGUAGE_KEY);
  } catch (error) {  // storage blocked (private windows, file: pages in some browsers)
    return null;
  }
}

function storeLanguage(language) {
  try {
    window.localStorage.setItem(LANGUAGE_KEY, language);
  } catch (error) {
    // The switch still works; the choice is just not remembered.
  }
}

// The id of the innermost section whose heading the reader has scrolled past (or the first one).
function sectionBeingRead() {
  const line = window.innerHeight * READING_LINE;
  let current = null;
  for (const section of document.querySelectorAll("article section[id]")) {
    if (section.getBoundingClientRect().top <= line) current = section.id;
  }
  return current;
}

// The twin's URL at the section that pairs with the one being read.
function twinURL(link, sections) {
  const url = new URL(link.href, window.location.href);
  const here = sectionBeingRead();
  url.hash = here && sections[here] ? sections[here] : "";
  return url.href;
}

// Point the sidebar's and the previous/next links to lesson pages at the chosen language's page.
function followLanguage(language) {
  if (language !== "r") return;
  const current = new URL(window.location.href);
  current.hash = "";
  for (const link of document.querySelectorAll(".bd-sidebar-primary a[href], .prev-next-area a[href]")) {
    const url = new URL(link.getAttribute("href"), window.location.href);
    const match = url.pathname.match(/(notebooks\/[^/]+)\.html$/);
    if (!match || !(match[1] in kerasdistTwins)) continue;
    link.setAttribute("href", link.getAttribute("href").replace(/\.html(?=#|$)/, "_R.html"));
    const target = new URL(link.href);
    target.hash = "";
    if (target.href === current.href && link.closest(".bd-sidebar-primary")) {
      link.classList.add("current");
      link.closest("li")?.classList.add("current", "active");
    }
  }
}

// A link in the text that names a lesson in one language (the course map's "Python" and "R") is a choice.
function rememberChosenLinks() {
  const twins = new Set(Object.keys(kerasdistTwins).flatMap((python) => [python, kerasdistTwins[python]]));
  document.querySelector(".bd-article")?.addEventListener("click", (event) => {
    const link = event.target.closest("a[href]");
    if (!link) return;
    const match = new URL(link.href, window.location.href).pathname.match(/(notebooks\/[^/]+)\.html$/);
    if (match && twins.has(match[1])) storeLanguage(match[1].endsWith("_R") ? "r" : "python");
  });
}

function setUpSwitch() {
  const chosen = storedLanguage();
  const nav = document.querySelector(".language-switch");
  if (nav) {
    const sections = JSON.parse(nav.dataset.sections || "{}");
    const other = nav.querySelector("a.language-switch-option:not(.active)");
    // A lesson opened in the other language than the reader chose: go to its twin, same section.
    if (chosen && other && chosen === other.dataset.language) {
      const target = new URL(other.href, window.location.href);
      const wanted = window.location.hash.slice(1);
      target.hash = wanted && sections[wanted] ? sections[wanted] : "";
      window.location.replace(target.href);
      return;
    }
    for (const option of nav.querySelectorAll("a.language-switch-option")) {
      option.addEventListener("click", (event) => {
        event.preventDefault();
        storeLanguage(option.dataset.language);
        if (!option.classList.contains("active")) window.location.href = twinURL(option, sections);
      });
    }
  }
  // Before the reader chose, the links follow the language of the page they are on.
  followLanguage(chosen || (nav && nav.dataset.current));
  rememberChosenLinks();
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", setUpSwitch);
} else {
  setUpSwitch();
}

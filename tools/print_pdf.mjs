// `make pdf`: prints the single-page build of the book (jupyter-book --builder singlehtml) to one PDF
// with the system Chromium, offline:
//   node tools/print_pdf.mjs <singlehtml dir> <output pdf> <venv python>
// Served on 127.0.0.1; any other host is aborted and fails the print, as does a script error, an
// image or slider figure that did not render, or MathJax not finishing. A table of contents is put
// under the book's title: the parts of _toc.yml, the chapters with their numbers, each page's
// title linked to it with the page it starts on (the PDF is printed, the pages of the links'
// targets read off it, and printed again until they hold). The API reference is moved to a final
// appendix in smaller type. Slider figures print at their first combination, their controls
// showing its values, with a note (book/_static/lengthgen.css), the plot laid out wider than the
// column and zoomed down to it, so that three panels keep room for their axis titles. Stored widget views (the training progress bars) are not rendered in the
// single page (myst-nb loads the widget manager only on pages of their own), so they print as
// nothing, leaving no gap. Python (tools/finish_pdf.py) reads the parts and the pages and writes
// the PDF's metadata (title, author, subject, keywords, version).
import { execFileSync } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { HARMLESS, launchChromium, onlyOrigin, serveDirectory } from "./browser.mjs";

if (process.argv.length !== 5 || !process.argv[3].endsWith(".pdf")) {
  throw new Error("usage: node tools/print_pdf.mjs <singlehtml dir> <output .pdf> <venv python>");
}
const [root, output, python] = [path.resolve(process.argv[2]), path.resolve(process.argv[3]), process.argv[4]];
const FINISH = path.join(path.dirname(fileURLToPath(import.meta.url)), "finish_pdf.py");
const finish = (...args) => execFileSync(python, [FINISH, ...args], { encoding: "utf8" });
// Pages moved out of _toc.yml's order to a final appendix, in smaller type.
const APPENDIX = { caption: "Appendix", docs: ["book/api"] };
// Slider figures are laid out this much wider than the printed column, then zoomed to it.
const SLIDER_ZOOM = 0.75;
// page.pdf's scale: body text of 16 CSS px prints at about 10 pt. The page is laid out at
// A4's printable width (210 mm less the margins below, 680 px at 96 dpi) divided by it.
const SCALE = 0.85;
const PRINT_WIDTH = Math.round(680 / SCALE);
const problems = [];

const server = await serveDirectory(root);
// The width the page prints at, so responsive figures are laid out at the width they print.
const browser = await launchChromium({ width: PRINT_WIDTH, height: 1000 });
const page = await browser.context.newPage();
page.setDefaultTimeout(120_000);
page.on("pageerror", (error) => error.message.includes(HARMLESS) || problems.push(`script error: ${error.message}`));
// singlehtml writes no search index, though the theme's search box asks for one: the only allowed 404.
const NO_INDEX = `${server.origin}/searchindex.js`;
page.on("response", (r) => r.status() >= 400 && r.url() !== NO_INDEX && problems.push(`HTTP ${r.status()} for ${r.url()}`));
await onlyOrigin(page, server.origin, (url) => problems.push(`requested another host: ${url}`));
await page.goto(`${server.origin}/index.html`, { waitUntil: "load" });  // the book (lengthgen_book.single_page_at_root)

// Every image loaded (lazy ones too), every slider figure drawn, MathJax done.
await page.evaluate(() => document.querySelectorAll("img[loading=lazy]").forEach((img) => { img.loading = "eager"; }));
await page.waitForFunction(() => [...document.images].every((img) => img.complete));
const blank = await page.evaluate(() => [...document.images].filter((img) => img.naturalWidth === 0).map((img) => img.src));
blank.forEach((src) => problems.push(`image did not load: ${src}`));
const sliders = await page.locator("[data-lengthgen-slider]").count();
try {
  await page.waitForFunction(
    () => [...document.querySelectorAll("[data-lengthgen-slider]")].every((figure) => {
      const gd = figure.querySelector(".js-plotly-plot");
      return gd?.querySelector(".main-svg") && gd.data?.length;
    }),
  );
} catch {
  problems.push("a slider figure was not drawn");
}
await page.waitForFunction(() => window.MathJax?.startup?.promise);
await page.evaluate(() => window.MathJax.startup.promise);
const unrendered = await page.locator("mjx-merror, .MathJax_Error").count();
if (unrendered) problems.push(`${unrendered} MathJax error(s)`);

// Slider figures as they print: the page laid out for print (nothing may be wider than the
// sheet, or Chromium shrinks the whole book to fit it), each plot drawn wider than its column and
// zoomed back to it (its controls, above it, keep their size).
await page.emulateMedia({ media: "print" });
await page.evaluate(async (zoom) => {
  for (const figure of document.querySelectorAll("[data-lengthgen-slider]")) {
    const gd = figure.querySelector(".js-plotly-plot");
    const column = figure.getBoundingClientRect().width;
    gd.querySelector(".plot-container").style.zoom = String(zoom);
    await window.Plotly.relayout(gd, { autosize: false, width: Math.floor(column / zoom) });
  }
}, SLIDER_ZOOM);

// Nothing wider than the sheet: Chromium would shrink every page to fit it.
const wide = await page.evaluate(() => document.documentElement.scrollWidth);
if (wide > PRINT_WIDTH) problems.push(`the book is ${wide} px wide in print, wider than the sheet's ${PRINT_WIDTH} px`);

// The appendix: its pages moved to the end, in smaller type (.print-appendix in lengthgen.css).
await page.evaluate((docs) => {
  for (const doc of docs) {
    const marker = document.getElementById(`document-${doc}`);
    const section = marker.nextElementSibling;
    section.classList.add("print-appendix");
    marker.parentElement.append(marker, section);
  }
}, APPENDIX.docs);

// The table of contents, before the first page after the root's title: singlehtml marks where each
// page of the book starts (<span id="document-NAME">) and the page's first heading is its title.
// Chapters (notebooks/NN_*.ipynb) carry their number NN; each entry ends with its page number.
const parts = [...JSON.parse(finish("parts")), APPENDIX].map((part) => ({
  caption: part.caption,
  docs: part.docs.filter((doc) => !APPENDIX.docs.includes(doc) || part === APPENDIX),
}));
const anchors = await page.evaluate((parts) => {
  const anchors = [];
  const entry = (doc) => {
    const section = document.getElementById(`document-${doc}`)?.nextElementSibling;
    const heading = section?.querySelector("h1, h2, h3")?.cloneNode(true);
    if (!heading) return "";
    heading.querySelectorAll(".headerlink").forEach((link) => link.remove());
    anchors.push(section.id);
    const chapter = /^notebooks\/(\d+)_/.exec(doc);
    const number = chapter ? `<span class="print-toc-number">${Number(chapter[1])}</span>` : "";
    return `<li><a href="#${section.id}">${number}<span class="print-toc-title">${heading.textContent.trim()}</span>`
      + `<span class="print-toc-page" data-anchor="${section.id}"></span></a></li>`;
  };
  const toc = document.createElement("nav");
  toc.className = "print-toc";
  toc.innerHTML = "<h2>Contents</h2>" + parts.map(
    (part) => `<p class="print-toc-part">${part.caption}</p><ol>${part.docs.map(entry).join("")}</ol>`,
  ).join("");
  document.querySelector("article.bd-article h1").after(toc);
  return anchors;
}, parts);
const pages = await page.locator('span[id^="document-"]').count();
if (anchors.length !== pages) problems.push(`the table of contents has ${anchors.length} entries for ${pages} pages`);

if (problems.length) {
  console.log(`make pdf FAILED:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
await mkdir(path.dirname(output), { recursive: true });
const print = async () => writeFile(output, await page.pdf({
  format: "A4",
  scale: SCALE,
  printBackground: true,
  outline: true,
  tagged: true,
  margin: { top: "18mm", bottom: "18mm", left: "15mm", right: "15mm" },
  displayHeaderFooter: true,
  headerTemplate: "<span></span>",
  footerTemplate: '<div style="font-size:8px;width:100%;text-align:center;color:#666">'
    + '<span class="title"></span> · page <span class="pageNumber"></span> of <span class="totalPages"></span></div>',
}));
// Print, read where each entry's page starts, write the numbers in, until they hold (the numbers
// take room reserved in advance, so this usually settles at the second print). Chromium does not
// always lay the same page out the same way twice: with nothing changed, successive prints of this
// book alternated between two layouts a page apart (seen from chapter 6 on). So after a miss the
// next print gets the numbers read two prints back, which match the layout that print gets; the
// loop still ends only on a print whose contents give its own page numbers.
let numbers = {};
const seen = [];
for (let pass = 1; ; pass++) {
  await page.evaluate((numbers) => document.querySelectorAll(".print-toc-page").forEach((span) => {
    span.textContent = numbers[span.dataset.anchor] ?? "";
  }), numbers);
  await print();
  const found = JSON.parse(finish("pages", output, ...anchors));
  if (anchors.every((a) => found[a] === numbers[a])) break;
  if (pass === 5) {
    console.log(`make pdf FAILED: the contents' page numbers did not settle after ${pass} prints`);
    process.exit(1);
  }
  seen.push(found);
  numbers = seen.length >= 2 ? seen[seen.length - 2] : found;
}
finish("metadata", output);
await browser.close();
server.close();
console.log(`${output}: ${sliders} slider figure(s) at their first step, ${anchors.length} contents entries with page numbers`);

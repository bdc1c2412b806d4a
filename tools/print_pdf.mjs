// `make pdf`: prints the single-page build of the book (jupyter-book --builder singlehtml) to one PDF
// with the system Chromium, offline:
//   node tools/print_pdf.mjs <singlehtml dir> <output pdf>
// Served on 127.0.0.1; any other host is aborted and fails the print, as does a script error, an
// image or slider figure that did not render, or MathJax not finishing. A table of contents (the
// book's pages, with links) is put under the book's title; slider figures print at their first step
// with a caption (book/_static/lengthgen.css). Stored widget views (the training progress bars) are
// not rendered in the single page (myst-nb loads the widget manager only on pages of their own), so
// they print as nothing, leaving no gap.
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { HARMLESS, launchChromium, onlyOrigin, serveDirectory } from "./browser.mjs";

if (process.argv.length !== 4 || !process.argv[3].endsWith(".pdf")) {
  throw new Error("usage: node tools/print_pdf.mjs <singlehtml dir> <output .pdf>");
}
const [root, output] = [path.resolve(process.argv[2]), path.resolve(process.argv[3])];
const problems = [];

const server = await serveDirectory(root);
// About A4's printable width at 96 dpi, so responsive figures are laid out at the width they print.
const browser = await launchChromium({ width: 720, height: 1000 });
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
    () => [...document.querySelectorAll("[data-lengthgen-slider]")].every((gd) => gd.querySelector(".main-svg") && gd.data?.length),
  );
} catch {
  problems.push("a slider figure was not drawn");
}
await page.waitForFunction(() => window.MathJax?.startup?.promise);
await page.evaluate(() => window.MathJax.startup.promise);
const unrendered = await page.locator("mjx-merror, .MathJax_Error").count();
if (unrendered) problems.push(`${unrendered} MathJax error(s)`);

// The table of contents, before the first page after the root's title: singlehtml marks where each
// page of the book starts (<span id="document-NAME">) and the page's first heading is its title.
const chapters = await page.evaluate(() => {
  const entries = [...document.querySelectorAll('span[id^="document-"]')].map((marker) => {
    const section = marker.nextElementSibling;
    const heading = section?.querySelector("h1, h2, h3")?.cloneNode(true);
    heading?.querySelectorAll(".headerlink").forEach((link) => link.remove());
    return heading && `<li><a href="#${section.id}">${heading.textContent.trim()}</a></li>`;
  });
  const toc = document.createElement("nav");
  toc.className = "print-toc";
  toc.innerHTML = `<h2>Contents</h2><ol>${entries.join("")}</ol>`;
  document.querySelector("article.bd-article h1").after(toc);
  return entries.filter(Boolean).length;
});
const pages = await page.locator('span[id^="document-"]').count();
if (chapters !== pages) problems.push(`the table of contents has ${chapters} entries for ${pages} pages`);

if (problems.length) {
  console.log(`make pdf FAILED:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
await mkdir(path.dirname(output), { recursive: true });
await page.pdf({
  path: output,
  format: "A4",
  printBackground: true,
  outline: true,
  tagged: true,
  margin: { top: "18mm", bottom: "18mm", left: "15mm", right: "15mm" },
  displayHeaderFooter: true,
  headerTemplate: "<span></span>",
  footerTemplate: '<div style="font-size:8px;width:100%;text-align:center;color:#666">'
    + '<span class="title"></span> · page <span class="pageNumber"></span> of <span class="totalPages"></span></div>',
});
await browser.close();
server.close();
console.log(`${output}: ${sliders} slider figure(s) at their first step, ${chapters} contents entries`);

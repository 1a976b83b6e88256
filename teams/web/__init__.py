"""The PM's pages (views, urls), the admin's charts, and the wording both faces share
(presentation)."""

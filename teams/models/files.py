"""The team's workspace files and their content-addressed revisions."""


from django.db import models

from teams.models.team import Agent, Team
from teams.models.work import Turn


class WorkspaceFile(models.Model):
    """Who last wrote a file of a team's workspace, in which turn: the PM's view of
    the team's output (the file itself lives in the workspace folder)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="workspace_files")
    path = models.CharField(max_length=500, help_text="Relative to the workspace.")
    size = models.PositiveBigIntegerField(default=0)
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="files_written"
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="files_written"
    )
    writes = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "path"]
        constraints = [
            models.UniqueConstraint(fields=["team", "path"], name="workspace_file_unique_path"),
        ]

    def __str__(self):
        return self.path


class FileBlob(models.Model):
    """A file's content, stored once by its SHA-256 whoever wrote it (teams.files.revisions)."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.PositiveBigIntegerField()
    content = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.sha256[:12]} ({self.size} bytes)"


class FileRevision(models.Model):
    """One write of a workspace file: which content, by whom, in which turn."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="file_revisions")
    path = models.CharField(max_length=500)
    blob = models.ForeignKey(FileBlob, on_delete=models.PROTECT, related_name="revisions")
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="file_revisions"
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="file_revisions"
    )
    number = models.PositiveIntegerField(help_text="1 for a file's first revision, then 2...")
    note = models.CharField(max_length=160, blank=True)
    deleted = models.BooleanField(
        default=False,
        help_text="The file was deleted (by a command): this revision holds no content.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "path", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "path", "number"], name="file_revision_number_unique"
            ),
        ]

    def __str__(self):
        return f"{self.path} r{self.number}"

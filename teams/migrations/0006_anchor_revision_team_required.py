# The revisions' team and key are filled (0005); now they are required. A separate
# migration: PostgreSQL refuses to alter a table with pending trigger events.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("teams", "0005_api_tokens_and_anchor_history"),
    ]

    operations = [
        migrations.AlterField(
            model_name='anchorrevision',
            name='team',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='anchor_revisions', to='teams.team'),
        ),
        migrations.AlterField(
            model_name='anchorrevision',
            name='key',
            field=models.CharField(max_length=80),
        ),
        migrations.AddIndex(
            model_name='anchorrevision',
            index=models.Index(fields=['team', 'key', '-id'], name='anchor_revision_history_idx'),
        ),
    ]

import shutil

import keras
import tensorflow as tf


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    with strategy.scope():
        model = build_and_compile()
        # slots (momentum) must exist before restoring so they are filled from the checkpoint
        model.optimizer.build(model.trainable_variables)
        epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="epochs_done")

    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epochs_done=epochs_done)
    manager = tf.train.CheckpointManager(ckpt, directory=backup_dir, max_to_keep=2)
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    initial_epoch = int(epochs_done.numpy())

    class EpochCheckpoint(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            epochs_done.assign(epoch + 1)
            manager.save(checkpoint_number=epoch + 1)

    model.fit(
        dataset,
        epochs=epochs,
        initial_epoch=initial_epoch,
        callbacks=[EpochCheckpoint(), *callbacks],
        verbose=0,
    )
    # finished normally: the backup has done its job
    shutil.rmtree(backup_dir, ignore_errors=True)
    return model
